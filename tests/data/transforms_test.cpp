// Transforms: Normalize values, RandomCrop with padding (every output is a
// window of the zero-padded input, all windows occur), RandomHorizontalFlip,
// and the per-example random streams.
#include "ddp/data/transforms.h"

#include <map>
#include <set>

#include "data/data_test_util.h"

namespace ddp::test {
namespace {

using data::SampleRng;

std::vector<float> ramp(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i + 1);
  return v;
}

TEST(SampleRng, DependsOnSeedEpochAndIndexOnly) {
  auto draws = [](uint64_t s, int64_t e, int64_t i) {
    SampleRng r(s, e, i);
    std::vector<uint32_t> v;
    for (int k = 0; k < 9; ++k) v.push_back(r.next_u32());
    return v;
  };
  EXPECT_EQ(draws(1, 2, 3), draws(1, 2, 3));
  EXPECT_NE(draws(1, 2, 3), draws(1, 2, 4));
  EXPECT_NE(draws(1, 2, 3), draws(1, 3, 3));
  EXPECT_NE(draws(1, 2, 3), draws(2, 2, 3));
  SampleRng r(0, 0, 0);
  std::set<int64_t> seen;
  for (int k = 0; k < 200; ++k) {
    const int64_t v = r.integer(-2, 2);
    ASSERT_GE(v, -2);
    ASSERT_LE(v, 2);
    seen.insert(v);
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  EXPECT_EQ(seen.size(), 5u);
}

TEST(Normalize, PerChannelValues) {
  data::Normalize n({0.5f, 1.0f}, {0.25f, 2.0f});
  const Shape s{2, 1, 3};
  EXPECT_EQ(n.output_shape(s), s);
  std::vector<float> in{0.5f, 1.0f, 0.0f, 1.0f, 3.0f, -1.0f}, out(6);
  SampleRng rng(0, 0, 0);
  n.apply(in.data(), s, out.data(), rng);
  EXPECT_EQ(out, (std::vector<float>{0.0f, 2.0f, -2.0f, 0.0f, 1.0f, -1.0f}));
  // Fashion-MNIST statistics: the same division torchvision performs.
  data::Normalize fm({0.2860f}, {0.3530f});
  std::vector<float> px{0.0f, 1.0f}, o(2);
  fm.apply(px.data(), {1, 1, 2}, o.data(), rng);
  EXPECT_EQ(o[0], (0.0f - 0.2860f) / 0.3530f);
  EXPECT_EQ(o[1], (1.0f - 0.2860f) / 0.3530f);
  // One value applies to every channel.
  EXPECT_EQ(fm.output_shape({3, 4, 4}), (Shape{3, 4, 4}));
}

TEST(Normalize, BadArguments) {
  EXPECT_THROW(data::Normalize({}, {}), ValueError);
  EXPECT_THROW(data::Normalize({0.f, 0.f}, {1.f}), ValueError);
  EXPECT_THROW(data::Normalize({0.f}, {0.f}), ValueError);
  data::Normalize n({0.f, 0.f}, {1.f, 1.f});
  expect_error<ShapeError>([&] { n.output_shape({3, 4, 4}); }, {"Normalize", "[3, 4, 4]"});
}

TEST(RandomCrop, EveryOutputIsAWindowOfThePaddedInput) {
  const int64_t c = 2, h = 4, w = 5, pad = 2, oh = 4, ow = 5;
  data::RandomCrop crop(oh, ow, pad, /*fill=*/0.0f);
  EXPECT_EQ(crop.output_shape({c, h, w}), (Shape{c, oh, ow}));
  const std::vector<float> in = ramp(c * h * w);
  // The padded image, for the reference windows.
  const int64_t ph = h + 2 * pad, pw = w + 2 * pad;
  std::vector<float> padded(size_t(c * ph * pw), 0.0f);
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        padded[size_t((ch * ph + y + pad) * pw + x + pad)] = in[size_t((ch * h + y) * w + x)];
  auto window = [&](int64_t top, int64_t left) {
    std::vector<float> v;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x)
          v.push_back(padded[size_t((ch * ph + top + y) * pw + left + x)]);
    return v;
  };
  std::map<std::pair<int64_t, int64_t>, int> hits;
  for (int64_t index = 0; index < 2000; ++index) {
    SampleRng rng(3, 0, index);
    std::vector<float> out(size_t(c * oh * ow), -1.0f);
    crop.apply(in.data(), {c, h, w}, out.data(), rng);
    int matches = 0;
    for (int64_t top = 0; top <= ph - oh; ++top)
      for (int64_t left = 0; left <= pw - ow; ++left)
        if (window(top, left) == out) {
          ++matches;
          ++hits[{top, left}];
        }
    ASSERT_EQ(matches, 1) << "example " << index << " is not exactly one window";
  }
  // (4 + 1) x (4 + 1) windows, each about 2000 / 25 = 80 times.
  ASSERT_EQ(hits.size(), 25u);
  for (auto [pos, n] : hits) EXPECT_NEAR(n, 80, 40) << pos.first << "," << pos.second;
}

TEST(RandomCrop, FillValueSmallerCropAndNoPadding) {
  data::RandomCrop crop(2, 3, /*padding=*/1, /*fill=*/-7.0f);
  const std::vector<float> in = ramp(1 * 2 * 2);
  int saw_fill = 0;
  for (int64_t i = 0; i < 50; ++i) {
    SampleRng rng(0, 1, i);
    std::vector<float> out(6);
    crop.apply(in.data(), {1, 2, 2}, out.data(), rng);
    for (float v : out) {
      EXPECT_TRUE(v == -7.0f || (v >= 1.0f && v <= 4.0f)) << v;
      saw_fill += v == -7.0f;
    }
  }
  EXPECT_GT(saw_fill, 0);
  // Without padding, a crop of the full size is the identity.
  data::RandomCrop same(2, 0);
  std::vector<float> out(4);
  SampleRng rng(0, 0, 0);
  same.apply(in.data(), {1, 2, 2}, out.data(), rng);
  EXPECT_EQ(out, in);
}

TEST(RandomCrop, BadShapes) {
  data::RandomCrop crop(32, 4);
  expect_error<ShapeError>([&] { crop.output_shape({3, 20, 20}); }, {"RandomCrop", "28x28"});
  expect_error<ShapeError>([&] { crop.output_shape({784}); }, {"[C, H, W]", "[784]"});
  EXPECT_THROW(data::RandomCrop(0, 1), ValueError);
  EXPECT_THROW(data::RandomCrop(2, -1), ValueError);
}

TEST(RandomHorizontalFlip, MirrorsRowsWithProbabilityP) {
  const Shape s{2, 2, 3};
  const std::vector<float> in = ramp(12);
  const std::vector<float> mirrored{3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10};
  std::vector<float> out(12);
  for (int64_t i = 0; i < 20; ++i) {
    SampleRng r1(0, 0, i), r0(0, 0, i);
    data::RandomHorizontalFlip(1.0).apply(in.data(), s, out.data(), r1);
    EXPECT_EQ(out, mirrored);
    data::RandomHorizontalFlip(0.0).apply(in.data(), s, out.data(), r0);
    EXPECT_EQ(out, in);
  }
  data::RandomHorizontalFlip half(0.5);
  int flipped = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    SampleRng r(5, 2, i);
    half.apply(in.data(), s, out.data(), r);
    ASSERT_TRUE(out == in || out == mirrored);
    flipped += out == mirrored;
  }
  EXPECT_NEAR(flipped, 500, 80);
  EXPECT_THROW(data::RandomHorizontalFlip(1.5), ValueError);
  EXPECT_THROW(half.output_shape({4, 4}), ShapeError);
}

}  // namespace
}  // namespace ddp::test
