#pragma once
// Element types.
//
// Note [Compute type]
// Kernels load a storage type T, compute in compute_t<T> (float for
// f16/bf16/f32, double for f64, int64 for integers) and store T again, so every
// backend rounds exactly once per op.

#include <cstdint>
#include <string>
#include <type_traits>

#include "ddp/core/half.h"

namespace ddp {

// X-macro of every dtype: (enum name, C++ storage type, printable name).
#define DDP_FOR_EACH_DTYPE(X) \
  X(f32, float, "f32")        \
  X(f64, double, "f64")       \
  X(f16, ::ddp::Half, "f16")  \
  X(bf16, ::ddp::BFloat16, "bf16") \
  X(i32, int32_t, "i32")      \
  X(i64, int64_t, "i64")      \
  X(u8, uint8_t, "u8")        \
  X(bool_, bool, "bool")

enum class DType : uint8_t {
#define DDP_DTYPE_ENUM(name, type, str) name,
  DDP_FOR_EACH_DTYPE(DDP_DTYPE_ENUM)
#undef DDP_DTYPE_ENUM
};
inline constexpr int kNumDTypes = 8;

// Short aliases for user code: ddp::kFloat32 etc.
inline constexpr DType kFloat32 = DType::f32;
inline constexpr DType kFloat64 = DType::f64;
inline constexpr DType kFloat16 = DType::f16;
inline constexpr DType kBFloat16 = DType::bf16;
inline constexpr DType kInt32 = DType::i32;
inline constexpr DType kInt64 = DType::i64;
inline constexpr DType kUInt8 = DType::u8;
inline constexpr DType kBool = DType::bool_;

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                       DType::i32, DType::i64, DType::u8,  DType::bool_};

size_t element_size(DType t);
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // "f32", "float32", "bf16", ... ; throws ValueError
bool is_floating(DType t);
bool is_integral(DType t);  // integer or bool
// Type promotion like PyTorch's for two tensors: bool < u8 < i32 < i64 < floats;
// f16 with bf16 gives f32; among floats the wider wins.
DType promote_types(DType a, DType b);

// Storage type for a dtype, and back.
template <DType D> struct dtype_traits;
#define DDP_DTYPE_TRAITS(name, cpp_type, str) \
  template <> struct dtype_traits<DType::name> { using type = cpp_type; };
DDP_FOR_EACH_DTYPE(DDP_DTYPE_TRAITS)
#undef DDP_DTYPE_TRAITS

template <class T> constexpr DType dtype_of();
#define DDP_DTYPE_OF(name, type, str) \
  template <> constexpr DType dtype_of<type>() { return DType::name; }
DDP_FOR_EACH_DTYPE(DDP_DTYPE_OF)
#undef DDP_DTYPE_OF

// See Note [Compute type].
template <class T> struct compute_type { using type = int64_t; };
template <> struct compute_type<float> { using type = float; };
template <> struct compute_type<double> { using type = double; };
template <> struct compute_type<Half> { using type = float; };
template <> struct compute_type<BFloat16> { using type = float; };
template <class T> using compute_t = typename compute_type<T>::type;

}  // namespace ddp
