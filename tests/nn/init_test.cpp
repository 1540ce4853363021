// Tests of nn::init (ddp/nn/init.h): fans and gains as torch computes them,
// bounds and statistics of the Kaiming and Xavier draws, reproducibility
// from the seeded generator, and in-place fills of trainable parameters.
#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

using nn::init::FanMode;
using nn::init::Nonlinearity;

struct Stats {
  double min, max, mean, var;
};
Stats stats(const Tensor& t) {
  std::vector<double> v = values(t);
  Stats s{*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()), 0, 0};
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.var += (x - s.mean) * (x - s.mean);
  s.var /= double(v.size());
  return s;
}

TEST(Init, FansLikeTorch) {
  nn::init::Fans f = nn::init::calculate_fans(Tensor::empty({64, 32}));
  EXPECT_EQ(f.fan_in, 32);
  EXPECT_EQ(f.fan_out, 64);
  f = nn::init::calculate_fans(Tensor::empty({64, 16, 3, 3}));  // a conv weight
  EXPECT_EQ(f.fan_in, 16 * 9);
  EXPECT_EQ(f.fan_out, 64 * 9);
  EXPECT_EQ(nn::init::calculate_fan(Tensor::empty({8, 4, 5}), FanMode::fan_out), 40);
  EXPECT_DDP_ERROR(nn::init::calculate_fans(Tensor::empty({10})), ShapeError,
                   "fan in and fan out need a tensor of at least 2 dims, got f32[10] on cpu");
}

TEST(Init, GainsLikeTorch) {
  // torch.nn.init.calculate_gain
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::linear), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::conv), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::sigmoid), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::relu), 1.4142135623730951);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::leaky_relu), 1.4141428569978354);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::leaky_relu, 0.2), 1.3867504905630728);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::leaky_relu, std::sqrt(5.0)),
                   0.5773502691896257);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::selu), 0.75);
}

TEST(Init, KaimingUniformBoundsAndStatistics) {
  manual_seed(0);
  Tensor w = Tensor::empty({256, 512});
  nn::init::kaiming_uniform_(w);  // a = 0, fan_in, leaky_relu: bound = sqrt(6 / fan_in)
  double bound = std::sqrt(6.0 / 512);
  Stats s = stats(w);
  EXPECT_GE(s.min, -bound);
  EXPECT_LE(s.max, bound);
  EXPECT_GT(s.max, 0.99 * bound);  // the whole range is used
  EXPECT_LT(s.min, -0.99 * bound);
  EXPECT_NEAR(s.mean, 0.0, 0.01 * bound);
  EXPECT_NEAR(s.var, bound * bound / 3, 0.02 * bound * bound / 3);
}

TEST(Init, KaimingUniformWithSqrt5IsTorchsLinearDefault) {
  // torch.nn.Linear: kaiming_uniform_(w, a=sqrt(5)) gives bound 1 / sqrt(fan_in).
  Tensor w = Tensor::empty({128, 100});
  nn::init::kaiming_uniform_(w, std::sqrt(5.0));
  Stats s = stats(w);
  EXPECT_LE(s.max, 0.1 + 1e-7);
  EXPECT_GE(s.min, -0.1 - 1e-7);
  EXPECT_GT(s.max, 0.099);
}

TEST(Init, KaimingFanOutAndNormal) {
  manual_seed(0);
  Tensor w = Tensor::empty({64, 16, 3, 3});
  nn::init::kaiming_normal_(w, 0, FanMode::fan_out, Nonlinearity::relu);  // torchvision's ResNet
  double stddev = std::sqrt(2.0 / (64 * 9));
  Stats s = stats(w);  // 9216 draws
  EXPECT_NEAR(s.mean, 0.0, 0.05 * stddev);
  EXPECT_NEAR(std::sqrt(s.var), stddev, 0.03 * stddev);
  Tensor u = Tensor::empty({64, 16, 3, 3});
  nn::init::kaiming_uniform_(u, 0, FanMode::fan_out, Nonlinearity::relu);
  EXPECT_LE(stats(u).max, std::sqrt(3.0) * stddev);
}

TEST(Init, XavierBoundsAndStd) {
  manual_seed(0);
  Tensor w = Tensor::empty({300, 200});
  nn::init::xavier_uniform_(w, 2.0);
  double bound = 2.0 * std::sqrt(6.0 / 500);
  Stats s = stats(w);
  EXPECT_LE(s.max, bound);
  EXPECT_GE(s.min, -bound);
  EXPECT_GT(s.max, 0.99 * bound);
  nn::init::xavier_normal_(w);
  EXPECT_NEAR(std::sqrt(stats(w).var), std::sqrt(2.0 / 500), 0.02 * std::sqrt(2.0 / 500));
}

TEST(Init, UniformNormalAndConstants) {
  manual_seed(0);
  Tensor w = Tensor::empty({1000});
  nn::init::uniform_(w, -2, 3);
  EXPECT_GE(stats(w).min, -2);
  EXPECT_LT(stats(w).max, 3);
  nn::init::normal_(w, 5, 0.5);
  EXPECT_NEAR(stats(w).mean, 5, 0.1);
  nn::init::constant_(w, 0.25);
  EXPECT_EQ(values(w), std::vector<double>(1000, 0.25));
  nn::init::ones_(w);
  EXPECT_EQ(stats(w).min, 1.0);
  nn::init::zeros_(w);
  EXPECT_EQ(stats(w).max, 0.0);
  EXPECT_DDP_ERROR(nn::init::zeros_(Tensor()), ValueError,
                   "init::constant_: the tensor is undefined");
}

TEST(Init, ReproducibleFromTheSeed) {
  Tensor a = Tensor::empty({16, 8}), b = Tensor::empty({16, 8});
  manual_seed(42);
  nn::init::kaiming_uniform_(a);
  manual_seed(42);
  nn::init::kaiming_uniform_(b);
  EXPECT_EQ(values(a), values(b));
  Generator g1(7), g2(7), g3(8);
  nn::init::normal_(a, 0, 1, &g1);
  nn::init::normal_(b, 0, 1, &g2);
  EXPECT_EQ(values(a), values(b));
  nn::init::normal_(b, 0, 1, &g3);
  EXPECT_NE(values(a), values(b));
}

TEST(Init, FillsTrainableParametersInPlaceWithoutHistory) {
  Tensor w = Tensor::zeros({4, 4}, TensorOptions().requires_grad());
  const void* data = w.data_ptr();
  Tensor r = nn::init::kaiming_uniform_(w);
  EXPECT_TRUE(r.is_same(w));
  EXPECT_EQ(w.data_ptr(), data);
  EXPECT_TRUE(w.is_leaf() && w.requires_grad());
  nn::init::constant_(w, 1.0);
  EXPECT_TRUE(w.is_leaf());
  // Strided views are filled where they point.
  Tensor big = Tensor::zeros({4, 6});
  nn::init::ones_(big.slice(1, 0, 6, 2));
  EXPECT_EQ(values(big.select(0, 0)), (std::vector<double>{1, 0, 1, 0, 1, 0}));
}

TEST(Init, EmptyTensorsAreLeftAlone) {
  Tensor w = Tensor::empty({0, 5});
  EXPECT_NO_THROW(nn::init::kaiming_uniform_(w));
  EXPECT_NO_THROW(nn::init::xavier_normal_(w));
}

}  // namespace
}  // namespace ddp::test
