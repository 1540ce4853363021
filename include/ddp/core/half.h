#pragma once
// 16-bit floating point storage types usable on the host and in CUDA kernels.
// Arithmetic happens in float: see Note [Compute type].

#include <cstdint>
#include <cstring>

#include "ddp/core/macros.h"

namespace ddp {

namespace detail {
DDP_INLINE_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
DDP_INLINE_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
}  // namespace detail

// IEEE 754 binary16. Conversions round to nearest even, keep inf/NaN.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  DDP_INLINE_HD Half(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a builtin
  DDP_INLINE_HD operator float() const { return to_float(bits); }

  DDP_INLINE_HD static uint16_t from_float(float f) {
    uint32_t x = detail::f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return uint16_t(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to inf
    if (abs < 0x38800000u) {                                   // subnormal or zero in half
      // Scale so the half subnormal lsb lands on the float's integer part.
      float a = detail::bits_f32(abs) * 16777216.0f;  // 2^24
      uint32_t m = uint32_t(a);
      float rem = a - float(m);
      if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
      return uint16_t(sign | m);
    }
    uint32_t mant = abs & 0x7fffffu;
    uint32_t exp = (abs >> 23) - 112u;  // rebias 127 -> 15
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return uint16_t(sign | h);
  }
  DDP_INLINE_HD static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
      float f = float(mant) * 5.9604644775390625e-8f;  // 2^-24
      return sign ? -f : f;
    }
    if (exp == 31) return detail::bits_f32(sign | 0x7f800000u | (mant << 13));
    return detail::bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
  }
};

// bfloat16: the upper half of an IEEE float. Round to nearest even, keep NaN.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  DDP_INLINE_HD BFloat16(float f) : bits(from_float(f)) {}  // NOLINT
  DDP_INLINE_HD operator float() const { return detail::bits_f32(uint32_t(bits) << 16); }

  DDP_INLINE_HD static uint16_t from_float(float f) {
    uint32_t x = detail::f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
    uint32_t lsb = (x >> 16) & 1u;
    return uint16_t((x + 0x7fffu + lsb) >> 16);
  }
};

}  // namespace ddp
