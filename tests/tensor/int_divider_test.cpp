// IntDivider32 (Note [Fast index division]) on the host: the multiply-high
// and shift must give exactly n / d and n % d for every divisor and
// dividend the CUDA strided kernels can meet, so it is checked against the
// hardware division over the edge cases and a random sweep.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/int_divider.h"

namespace ddp::kernels {
namespace {

void expect_divides(uint32_t d, uint32_t n) {
  const IntDivider32 div(d);
  uint32_t q = 0, r = 0;
  div.divmod(n, q, r);
  ASSERT_EQ(q, n / d) << n << " / " << d;
  ASSERT_EQ(r, n % d) << n << " % " << d;
}

std::vector<uint32_t> edge_values() {
  std::vector<uint32_t> v = {0, 1, 2, 3, 5, 7, 10, 100, 255, 1000, 65535, 65536, 65537,
                             1000003, 0x7fffffffu, 0x80000000u, 0x80000001u, 0xfffffffeu,
                             0xffffffffu};
  for (int s = 1; s < 32; ++s) {  // around every power of two
    const uint32_t p = uint32_t(1) << s;
    v.insert(v.end(), {p - 1, p, p + 1});
  }
  return v;
}

TEST(IntDivider32, EdgeDivisorsAndDividends) {
  const std::vector<uint32_t> values = edge_values();
  for (uint32_t d : values) {
    if (d == 0) continue;
    for (uint32_t n : values) expect_divides(d, n);
    // Multiples of d and their neighbours, where a rounding error would show.
    for (uint64_t k : {1ull, 2ull, 3ull, 1000ull, 0xffffffffull / d}) {
      const uint64_t m = k * d;
      if (m > 0xffffffffull) continue;
      expect_divides(d, uint32_t(m));
      expect_divides(d, uint32_t(m - 1));
      if (m < 0xffffffffull) expect_divides(d, uint32_t(m + 1));
    }
  }
}

TEST(IntDivider32, RandomDivisorsAndDividends) {
  std::mt19937_64 gen(18);
  for (int i = 0; i < 200000; ++i) {
    // Mostly tensor-like sizes (small), some anywhere in the range.
    const uint32_t d = i % 4 == 0 ? uint32_t(gen() | 1u) : uint32_t(gen() % 4096 + 1);
    const uint32_t n = i % 2 == 0 ? uint32_t(gen()) : uint32_t(gen() % (uint64_t(d) * 64 + 1));
    expect_divides(d, n);
  }
}

TEST(IntDivider32, DividerOfOneIsTheIdentity) {
  const IntDivider32 one(1);
  EXPECT_EQ(one.shift, 0u);
  for (uint32_t n : {0u, 1u, 12345u, 0xffffffffu}) EXPECT_EQ(one.div(n), n);
}

}  // namespace
}  // namespace ddp::kernels
