// Histogram bucket maths and the bucket helpers.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ddp/core/error.h"
#include "ddp/metrics/registry.h"

namespace ddp::metrics {
namespace {

TEST(Histogram, CumulativeBucketsSumAndCount) {
  Histogram h({1, 2, 4});
  for (double v : {0.0, 1.0, 1.0001, 2.0, 3.0, 4.0, 5.0, -7.0}) h.observe(v);
  const auto s = h.snapshot();
  ASSERT_EQ(s.cumulative.size(), 4u);
  // le=1: 0, 1, -7; le=2: + 1.0001, 2; le=4: + 3, 4; +Inf: + 5.
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{3, 5, 7, 8}));
  EXPECT_EQ(s.count, 8u);
  EXPECT_DOUBLE_EQ(s.sum, 0 + 1 + 1.0001 + 2 + 3 + 4 + 5 - 7);
  EXPECT_EQ(s.upper_bounds, (std::vector<double>{1, 2, 4}));
}

TEST(Histogram, EmptyHistogramIsAllZero) {
  Histogram h({0.5});
  const auto s = h.snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.sum, 0);
}

TEST(Histogram, NoBoundsHasOnlyInf) {
  Histogram h({});
  h.observe(123);
  EXPECT_EQ(h.snapshot().cumulative, (std::vector<uint64_t>{1}));
}

TEST(Histogram, InfinityAndNaNLandInTheLastBucket) {
  Histogram h({1});
  h.observe(std::numeric_limits<double>::infinity());
  h.observe(std::numeric_limits<double>::quiet_NaN());
  h.observe(-std::numeric_limits<double>::infinity());
  const auto s = h.snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{1, 3}));
  EXPECT_TRUE(std::isnan(s.sum));
}

TEST(Histogram, RejectsBadBounds) {
  EXPECT_THROW(Histogram({2, 1}), ValueError);
  EXPECT_THROW(Histogram({1, 1}), ValueError);
  EXPECT_THROW(Histogram({1, std::numeric_limits<double>::infinity()}), ValueError);
  EXPECT_THROW(Histogram({std::numeric_limits<double>::quiet_NaN()}), ValueError);
}

TEST(Buckets, ExponentialAndLinear) {
  EXPECT_EQ(exponential_buckets(0.5, 4, 3), (std::vector<double>{0.5, 2, 8}));
  EXPECT_EQ(exponential_buckets(1, 2, 5), (std::vector<double>{1, 2, 4, 8, 16}));
  EXPECT_EQ(linear_buckets(-1, 0.5, 4), (std::vector<double>{-1, -0.5, 0, 0.5}));
  EXPECT_THROW(exponential_buckets(0, 2, 3), ValueError);
  EXPECT_THROW(exponential_buckets(1, 1, 3), ValueError);
  EXPECT_THROW(exponential_buckets(1, 2, 0), ValueError);
  EXPECT_THROW(linear_buckets(0, 0, 3), ValueError);
  EXPECT_THROW(linear_buckets(0, 1, 0), ValueError);
}

}  // namespace
}  // namespace ddp::metrics
