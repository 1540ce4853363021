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
//
// Note [Hardware half conversions]
// Half and BFloat16 convert in software (ddp/core/half.h), which is what the
// host needs. In device code the GPU converts in one instruction
// (__float2half_rn, __half2float, __float2bfloat16_rn, __bfloat162float), so
// to_float / from_float below use those under __CUDA_ARCH__. Both round to
// nearest even and handle subnormals and infinities like the software path;
// only NaN may differ (the hardware may give a canonical NaN), so a NaN takes
// the software path, which keeps the two backends bit for bit alike.

#include <cstdint>
#include <type_traits>

#include "ddp/core/dtype.h"
#include "ddp/core/macros.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace ddp::kernels {

template <class T>
inline constexpr bool is_half_like = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T>
inline constexpr bool is_float_like = std::is_floating_point_v<T> || is_half_like<T>;

// See Note [Hardware half conversions].
DDP_INLINE_HD float to_float(Half h) {
#ifdef __CUDA_ARCH__
  if ((h.bits & 0x7c00u) == 0x7c00u && (h.bits & 0x3ffu) != 0u) return float(h);  // NaN payload
  return __half2float(__ushort_as_half(h.bits));
#else
  return float(h);
#endif
}
DDP_INLINE_HD float to_float(BFloat16 h) {
#ifdef __CUDA_ARCH__
  return __bfloat162float(__ushort_as_bfloat16(h.bits));
#else
  return float(h);
#endif
}
template <class H>
DDP_INLINE_HD H from_float(float f) {
  static_assert(is_half_like<H>);
#ifdef __CUDA_ARCH__
  H h;
  if (f != f) {
    h.bits = H::from_float(f);  // keep the software NaN (sign and payload rule)
  } else if constexpr (std::is_same_v<H, Half>) {
    h.bits = __half_as_ushort(__float2half_rn(f));
  } else {
    h.bits = __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
  return h;
#else
  return H(f);
#endif
}

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
      return to_float(v) != 0.0f;
    else
      return v != S(0);
  } else if constexpr (std::is_same_v<S, bool>) {
    if constexpr (is_half_like<D>)
      return from_float<D>(v ? 1.0f : 0.0f);
    else
      return D(v ? 1 : 0);
  } else if constexpr (is_half_like<D>) {
    if constexpr (is_half_like<S>)
      return from_float<D>(to_float(v));
    else  // f64 -> f32 -> f16 rounds twice, like torch's c10::Half(double)
      return from_float<D>(float(v));
  } else if constexpr (is_half_like<S>) {
    return cast_to<D>(to_float(v));
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
  if constexpr (is_half_like<T>)
    return to_float(v);
  else
    return compute_t<T>(v);
}
template <class T>
DDP_INLINE_HD T store(compute_t<T> c) {
  if constexpr (std::is_same_v<T, bool>)
    return c != 0;
  else if constexpr (is_half_like<T>)
    return from_float<T>(c);
  else
    return T(c);
}

}  // namespace ddp::kernels
