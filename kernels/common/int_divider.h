#pragma once
// Division by a run-time constant through a precomputed multiplier, for the
// CUDA strided kernels (Note [Fast index division]). Host and device code:
// the host builds the dividers, the kernels use them, and a CPU unit test
// checks them against / and %.
//
// Note [Fast index division]
// A strided elementwise kernel turns the linear index i into one offset per
// operand by dividing by each merged dim's size. A 64-bit divide is a long
// software sequence on the GPU (tens of instructions per dim per element);
// when every index and offset fits in 32 bits, a multiply-high and a shift
// do it. For a divisor d in [1, 2^32) let s = ceil(log2 d) and
//   m = floor(2^32 * (2^s - d) / d) + 1            (m < 2^32).
// Then for every n in [0, 2^32):  n / d == (umulhi(n, m) + n) >> s,
// where the sum is taken in 64 bits so it cannot overflow (this is the
// round-up multiplier method of Granlund and Montgomery, "Division by
// invariant integers using multiplication", PLDI 1994, with the 33-bit
// multiplier 2^32 + m split into the add of n). The remainder is n - q * d.

#include <cstdint>

#include "ddp/core/macros.h"

namespace ddp::kernels {

struct IntDivider32 {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;  // m above
  uint32_t shift = 0;       // s above

  IntDivider32() = default;
  // d >= 1 (a merged dim's size); the caller never passes 0.
  DDP_INLINE_HD explicit IntDivider32(uint32_t d) : divisor(d) {
    uint32_t s = 0;
    while (s < 32 && (uint64_t(1) << s) < uint64_t(d)) ++s;
    shift = s;
    const uint64_t two_s = uint64_t(1) << s;
    multiplier = uint32_t(((uint64_t(1) << 32) * (two_s - d)) / d + 1);
  }

  DDP_INLINE_HD uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(n, multiplier);
#else
    const uint32_t hi = uint32_t((uint64_t(n) * multiplier) >> 32);
#endif
    return uint32_t((uint64_t(hi) + n) >> shift);
  }

  // Quotient and remainder at once: what the offset loop needs.
  DDP_INLINE_HD void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

}  // namespace ddp::kernels
