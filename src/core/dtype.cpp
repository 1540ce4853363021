#include "ddp/core/dtype.h"

#include "ddp/core/error.h"

namespace ddp {

size_t element_size(DType t) {
  switch (t) {
#define DDP_SIZE_CASE(name, type, str) \
  case DType::name: return sizeof(type);
    DDP_FOR_EACH_DTYPE(DDP_SIZE_CASE)
#undef DDP_SIZE_CASE
  }
  DDP_THROW(DTypeError, "element_size: unknown dtype {}", int(t));
}

const char* dtype_name(DType t) {
  switch (t) {
#define DDP_NAME_CASE(name, type, str) \
  case DType::name: return str;
    DDP_FOR_EACH_DTYPE(DDP_NAME_CASE)
#undef DDP_NAME_CASE
  }
  return "unknown";
}

DType dtype_from_name(const std::string& name) {
  struct Alias { const char* name; DType t; };
  static constexpr Alias kAliases[] = {
      {"f32", DType::f32},   {"float32", DType::f32},   {"float", DType::f32},
      {"f64", DType::f64},   {"float64", DType::f64},   {"double", DType::f64},
      {"f16", DType::f16},   {"float16", DType::f16},   {"half", DType::f16},
      {"bf16", DType::bf16}, {"bfloat16", DType::bf16}, {"i32", DType::i32},
      {"int32", DType::i32}, {"i64", DType::i64},       {"int64", DType::i64},
      {"u8", DType::u8},     {"uint8", DType::u8},      {"bool", DType::bool_}};
  for (const auto& a : kAliases)
    if (name == a.name) return a.t;
  DDP_THROW(ValueError, "unknown dtype name '{}' (expected f32, f64, f16, bf16, i32, i64, u8 or bool)",
            name);
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
bool is_integral(DType t) { return !is_floating(t); }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // Rank within each category; floats beat integers.
  auto int_rank = [](DType t) {
    switch (t) {
      case DType::bool_: return 0;
      case DType::u8: return 1;
      case DType::i32: return 2;
      default: return 3;  // i64
    }
  };
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (!fa) return int_rank(a) >= int_rank(b) ? a : b;
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;  // f32 with anything, or f16 with bf16
}

}  // namespace ddp
