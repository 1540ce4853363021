// Tests of Half (IEEE binary16) and BFloat16 conversions in ddp/core/half.h.
// Expected bit patterns marked "torch" were computed with Debian's
// python3-torch 1.13.1 by
//   t = torch.tensor([v], dtype=torch.float32)
//   t.half().view(torch.int16), t.bfloat16().view(torch.int16)
// (and the reverse with .view(torch.float16/bfloat16).float()).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "ddp/core/half.h"

namespace ddp {
namespace {

uint16_t half_bits(float f) { return Half(f).bits; }
uint16_t bf16_bits(float f) { return BFloat16(f).bits; }
float from_half_bits(uint16_t b) { Half h; h.bits = b; return float(h); }
float from_bf16_bits(uint16_t b) { BFloat16 h; h.bits = b; return float(h); }

struct Case { float value; uint16_t half; uint16_t bf16; };

TEST(Half, MatchesTorchOnSelectedValues) {
  const float two_m24 = std::ldexp(1.0f, -24), two_m25 = std::ldexp(1.0f, -25);
  const Case kCases[] = {
      // value                      half    bf16     (torch)
      {1.0f,                        0x3C00, 0x3F80},
      {-2.5f,                       0xC100, 0xC020},
      {0.1f,                        0x2E66, 0x3DCD},
      {1.0f / 3.0f,                 0x3555, 0x3EAB},
      {3.14159265f,                 0x4248, 0x4049},
      {33.3f,                       0x502A, 0x4205},
      {65504.0f,                    0x7BFF, 0x4780},  // half max
      {65519.0f,                    0x7BFF, 0x4780},  // just below the overflow tie
      {65520.0f,                    0x7C00, 0x4780},  // the tie overflows to inf
      {1e6f,                        0x7C00, 0x4974},  // half overflow
      {-1e6f,                       0xFC00, 0xC974},
      {std::ldexp(1.0f, -14),       0x0400, 0x3880},  // smallest normal half
      {two_m24,                     0x0001, 0x3380},  // smallest subnormal half
      {two_m25,                     0x0000, 0x3300},  // tie between 0 and 2^-24: even = 0
      {3 * std::ldexp(1.0f, -26),   0x0001, 0x3340},  // above the tie
      {1.5f * two_m24,              0x0002, 0x33C0},  // tie between 1 and 2 lsb: 2
      {2.5f * two_m24,              0x0002, 0x3420},  // tie between 2 and 3 lsb: 2
      {std::ldexp(1.0f, -14) - two_m25, 0x0400, 0x3880},  // subnormal rounds up to normal
      {1.0f + std::ldexp(1.0f, -11), 0x3C00, 0x3F80},  // half tie, down to even
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3C02, 0x3F80},  // half tie, up to even
      {1.0f + std::ldexp(1.0f, -8), 0x3C04, 0x3F80},  // bf16 tie, down to even
      {1.0f + 3 * std::ldexp(1.0f, -8), 0x3C0C, 0x3F82},  // bf16 tie, up to even
      {2049.0f,                     0x6800, 0x4500},
      {2051.0f,                     0x6802, 0x4500},
      {1e-8f,                       0x0000, 0x322C},  // half underflow to 0
      {1e-40f,                      0x0000, 0x0001},  // f32 subnormal -> bf16 subnormal
      {std::numeric_limits<float>::max(), 0x7C00, 0x7F80},  // bf16 rounds up to inf
      {-0.0f,                       0x8000, 0x8000},
      {std::numeric_limits<float>::infinity(), 0x7C00, 0x7F80},
      {-std::numeric_limits<float>::infinity(), 0xFC00, 0xFF80},
  };
  for (const Case& c : kCases) {
    EXPECT_EQ(half_bits(c.value), c.half) << "half of " << c.value;
    EXPECT_EQ(bf16_bits(c.value), c.bf16) << "bf16 of " << c.value;
  }
}

TEST(Half, ToFloatMatchesTorch) {
  // torch: torch.tensor([bits], dtype=torch.int16).view(torch.float16).float()
  EXPECT_EQ(from_half_bits(0x0001), 5.960464477539063e-08f);
  EXPECT_EQ(from_half_bits(0x03FF), 6.097555160522461e-05f);
  EXPECT_EQ(from_half_bits(0x0400), 6.103515625e-05f);
  EXPECT_EQ(from_half_bits(0x3555), 0.333251953125f);
  EXPECT_EQ(from_half_bits(0x7BFF), 65504.0f);
  EXPECT_EQ(from_half_bits(0xFBFF), -65504.0f);
  EXPECT_EQ(from_half_bits(0x8001), -5.960464477539063e-08f);
  EXPECT_EQ(from_half_bits(0xC000), -2.0f);
  EXPECT_EQ(from_half_bits(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(from_half_bits(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(from_half_bits(0x8000)));
  EXPECT_EQ(from_half_bits(0x8000), 0.0f);
}

TEST(Half, NaNStaysNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint16_t h = half_bits(nan);
  EXPECT_EQ(h & 0x7C00, 0x7C00);
  EXPECT_NE(h & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(float(Half(nan))));
  EXPECT_TRUE(std::isnan(float(Half(-nan))));
  // A signalling-NaN pattern whose payload lives only in the low float bits
  // must not turn into inf.
  float snan = std::numeric_limits<float>::signaling_NaN();
  EXPECT_TRUE(std::isnan(float(Half(snan))));
  float low_payload;
  uint32_t u = 0x7F800001u;
  std::memcpy(&low_payload, &u, 4);
  EXPECT_TRUE(std::isnan(float(Half(low_payload))));
  for (uint16_t b : {uint16_t(0x7C01), uint16_t(0x7E00), uint16_t(0xFFFF)})
    EXPECT_TRUE(std::isnan(from_half_bits(b))) << b;
}

// Every finite half survives float -> half unchanged, and every NaN stays NaN.
TEST(Half, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    float f = from_half_bits(uint16_t(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(float(Half(f)))) << b;
    } else {
      ASSERT_EQ(half_bits(f), uint16_t(b)) << "pattern " << b << " = " << f;
    }
  }
}

// Between every two adjacent positive finite halves: the exact midpoint goes
// to the one with the even mantissa, a hair above goes up, a hair below down.
TEST(Half, RoundsToNearestEvenEverywhere) {
  for (uint32_t b = 0; b < 0x7BFF; ++b) {
    float lo = from_half_bits(uint16_t(b)), hi = from_half_bits(uint16_t(b + 1));
    float mid = (lo + hi) / 2;  // exact: halves have 11 significant bits
    ASSERT_EQ(half_bits(mid), (b & 1) ? b + 1 : b) << "tie after pattern " << b;
    ASSERT_EQ(half_bits(std::nextafter(mid, hi)), b + 1) << b;
    ASSERT_EQ(half_bits(std::nextafter(mid, lo)), b) << b;
    ASSERT_EQ(half_bits(-mid), 0x8000u | ((b & 1) ? b + 1 : b)) << b;
  }
}

TEST(Half, OverflowsToInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float(Half(65519.99f)), 65504.0f);
  EXPECT_EQ(float(Half(65520.0f)), inf);
  EXPECT_EQ(float(Half(1e30f)), inf);
  EXPECT_EQ(float(Half(-1e30f)), -inf);
  EXPECT_EQ(float(Half(std::numeric_limits<float>::max())), inf);
}

TEST(Half, ArithmeticGoesThroughFloat) {
  Half a(1.5f), b(2.25f);
  float s = a + b;
  EXPECT_EQ(s, 3.75f);
  Half c = a * b;  // 3.375 is exact in half
  EXPECT_EQ(float(c), 3.375f);
}

TEST(BFloat16, ToFloatMatchesTorch) {
  // torch: torch.tensor([bits], dtype=torch.int16).view(torch.bfloat16).float()
  EXPECT_EQ(from_bf16_bits(0x0001), 9.183549615799121e-41f);
  EXPECT_EQ(from_bf16_bits(0x3F80), 1.0f);
  EXPECT_EQ(from_bf16_bits(0x4049), 3.140625f);
  EXPECT_EQ(from_bf16_bits(0x7F7F), 3.3895313892515355e+38f);
  EXPECT_EQ(from_bf16_bits(0xC2F7), -123.5f);
  EXPECT_EQ(from_bf16_bits(0xFF80), -std::numeric_limits<float>::infinity());
}

TEST(BFloat16, NaNStaysNaN) {
  EXPECT_TRUE(std::isnan(float(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(float(BFloat16(-std::numeric_limits<float>::quiet_NaN()))));
  // Payload only in the low 16 bits: truncation would give inf; it must stay NaN.
  float low_payload;
  uint32_t u = 0x7F800001u;
  std::memcpy(&low_payload, &u, 4);
  EXPECT_TRUE(std::isnan(float(BFloat16(low_payload))));
  u = 0xFF80FFFFu;
  std::memcpy(&low_payload, &u, 4);
  EXPECT_TRUE(std::isnan(float(BFloat16(low_payload))));
}

TEST(BFloat16, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    float f = from_bf16_bits(uint16_t(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(float(BFloat16(f)))) << b;
    } else {
      ASSERT_EQ(bf16_bits(f), uint16_t(b)) << "pattern " << b;
    }
  }
}

TEST(BFloat16, RoundsToNearestEvenEverywhere) {
  for (uint32_t b = 0; b < 0x7F7F; ++b) {
    float lo = from_bf16_bits(uint16_t(b)), hi = from_bf16_bits(uint16_t(b + 1));
    uint32_t lo_u;
    std::memcpy(&lo_u, &lo, 4);
    uint32_t mid_u = lo_u + 0x8000u;  // the float halfway to the next bf16
    float mid;
    std::memcpy(&mid, &mid_u, 4);
    ASSERT_EQ(bf16_bits(mid), (b & 1) ? b + 1 : b) << "tie after pattern " << b;
    ASSERT_EQ(bf16_bits(std::nextafter(mid, hi)), b + 1) << b;
    ASSERT_EQ(bf16_bits(std::nextafter(mid, lo)), b) << b;
    ASSERT_EQ(bf16_bits(-mid), 0x8000u | ((b & 1) ? b + 1 : b)) << b;
  }
}

TEST(BFloat16, OverflowsToInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  // The largest finite bf16 is 0x7F7F; floats at or past its midpoint with
  // 0x7F80 (which would be the next "value") round to inf.
  uint32_t u = 0x7F7F8000u;
  float tie;
  std::memcpy(&tie, &u, 4);
  EXPECT_EQ(float(BFloat16(tie)), inf);
  EXPECT_EQ(float(BFloat16(-tie)), -inf);
  EXPECT_EQ(float(BFloat16(std::nextafter(tie, 0.0f))), 3.3895313892515355e+38f);
  EXPECT_EQ(float(BFloat16(inf)), inf);
  EXPECT_EQ(float(BFloat16(-inf)), -inf);
}

TEST(BFloat16, KeepsSubnormals) {
  // bf16 has float's exponent range, so float subnormals survive (rounded).
  float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(float(BFloat16(tiny)), 0.0f);  // 2^-149 is below half of bf16's smallest subnormal (2^-133)
  EXPECT_EQ(bf16_bits(std::ldexp(1.0f, -133)), 0x0001);
  EXPECT_EQ(bf16_bits(std::ldexp(1.0f, -134)), 0x0000);  // tie: even = 0
  EXPECT_EQ(bf16_bits(std::ldexp(3.0f, -135)), 0x0001);
}

}  // namespace
}  // namespace ddp
