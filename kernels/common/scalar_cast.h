#pragma once
// Scalar conversions between storage types, shared by the CPU and CUDA
// kernels so both backends cast bit for bit alike.
//
// Note [Scalar casts]
// cast_to<D>(S) is what copy() and fill() do per element:
//  - to bool: value != 0 (NaN is true), like torch;
//  - from bool: 0 or 1;
//  - to f16/bf16: through float, rounding to nearest even (half.h);
//  - floating to integer: truncate toward zero through int64, saturating at
//    the int64 range and giving 0 for NaN (what the GPU's cvt.rzi does, so
//    both backends agree instead of relying on C++ undefined behaviour);
//    narrower integers then wrap modulo 2^bits like integer-to-integer casts.

#include <cstdint>
#include <type_traits>

#include "ddp/core/dtype.h"
#include "ddp/core/macros.h"

namespace ddp::kernels {

template <class T>
inline constexpr bool is_half_like = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T>
inline constexpr bool is_float_like = std::is_floating_point_v<T> || is_half_like<T>;

DDP_INLINE_HD int64_t float_to_i64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return int64_t(v);
}

template <class D, class S>
DDP_INLINE_HD D cast_to(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, bool>) {
    if constexpr (is_half_like<S>)
      return float(v) != 0.0f;
    else
      return v != S(0);
  } else if constexpr (std::is_same_v<S, bool>) {
    if constexpr (is_half_like<D>)
      return D(v ? 1.0f : 0.0f);
    else
      return D(v ? 1 : 0);
  } else if constexpr (is_half_like<D>) {
    return D(float(v));  // f64 -> f32 -> f16 rounds twice, like torch's c10::Half(double)
  } else if constexpr (is_half_like<S>) {
    return cast_to<D>(float(v));
  } else if constexpr (std::is_floating_point_v<D>) {
    return D(v);
  } else if constexpr (std::is_floating_point_v<S>) {
    return D(float_to_i64(double(v)));  // D is an integer here
  } else {
    return D(v);  // integer to integer: wraps modulo 2^bits
  }
}

// Load into / store from the compute type (Note [Compute type]). Integers and
// bool compute in int64; storing an int64 into u8/i32 wraps, into bool tests != 0.
template <class T>
DDP_INLINE_HD compute_t<T> load(T v) {
  return compute_t<T>(v);
}
template <class T>
DDP_INLINE_HD T store(compute_t<T> c) {
  if constexpr (std::is_same_v<T, bool>)
    return c != 0;
  else
    return T(c);
}

}  // namespace ddp::kernels
