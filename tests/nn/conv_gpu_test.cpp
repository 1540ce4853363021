// GPU tests of the convolution-family layers (label gpu; skipped without a
// usable GPU): CUDA against the CPU on the same inputs and parameters.
//
// Tolerances (rel_error of conv_golden_util.h, relative to the largest
// reference magnitude): f32 ≤ 1e-4 (cuDNN runs f32 without TF32, Note [cuDNN
// convolution]); f16 ≤ 5e-3 and bf16 ≤ 3e-2 against the f32 CPU result for
// the small channel counts used here (inputs rounded to 11 / 8 significant
// bits, f32 accumulation); gradients get twice that.
#include <memory>

#include "ddp/nn/batch_norm.h"
#include "ddp/nn/conv.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/pooling.h"
#include "ddp/tensor/cuda.h"
#include "nn/conv_golden_util.h"

namespace ddp::test {
namespace {

using nn::functional::is_channels_last;
using nn::functional::to_channels_last;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason()

struct Grads {
  Tensor y, dx;
  Tensors dparams;
};

// Runs module m on x (converted to device/dtype/layout) with upstream dy and
// returns the output and gradients as f32 CPU tensors.
Grads run(nn::UnaryModule& m, const Tensor& x_cpu, const Tensor& dy_cpu, Device device, DType dtype,
          bool channels_last) {
  m.zero_grad();
  m.to(device, dtype);
  Tensor x = x_cpu.to(device, dtype).detach();
  Tensor dy = dy_cpu.to(device, dtype);
  if (channels_last) x = to_channels_last(x).detach(), dy = to_channels_last(dy);
  x.set_requires_grad();
  Tensor y = m.forward(x);
  EXPECT_EQ(is_channels_last(y), channels_last && !y.is_contiguous());
  sum(y * dy).backward();
  Grads g{y.cpu().to(kFloat32), x.grad().cpu().to(kFloat32), {}};
  for (const Tensor& p : m.parameters()) g.dparams.push_back(p.grad().cpu().to(kFloat32));
  return g;
}

void expect_close(const Grads& a, const Grads& b, double tol) {
  EXPECT_REL_NEAR(a.y, b.y, tol);
  EXPECT_REL_NEAR(a.dx, b.dx, 2 * tol);
  ASSERT_EQ(a.dparams.size(), b.dparams.size());
  for (size_t i = 0; i < a.dparams.size(); ++i)
    EXPECT_REL_NEAR(a.dparams[i], b.dparams[i], 2 * tol);
}

std::shared_ptr<nn::Conv2d> conv_for_case(int i) {
  switch (i) {
    case 0:
      return std::make_shared<nn::Conv2d>(8, 16, 3, 1, 1);
    case 1:
      return std::make_shared<nn::Conv2d>(8, 16, 3, 2, 1, 1, 1, false);
    case 2:
      return std::make_shared<nn::Conv2d>(8, 8, nn::Int2{3, 2}, nn::Int2{1, 2}, nn::Int2{2, 1},
                                          nn::Int2{2, 1});
    default:
      return std::make_shared<nn::Conv2d>(8, 16, 3, 1, 1, 1, /*groups=*/4);
  }
}

TEST(ConvGpuTest, Conv2dMatchesCpuF32) {
  SKIP_WITHOUT_GPU();
  for (int i = 0; i < 4; ++i) {
    for (bool cl : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "case " << i << (cl ? " nhwc" : " nchw"));
      manual_seed(10 + i);
      auto conv = conv_for_case(i);
      Tensor x = randn({2, 8, 12, 10});
      Tensor y_shape = conv->forward(x);
      Tensor dy = randn(y_shape.shape());
      Grads cpu = run(*conv, x, dy, Device::cpu(), kFloat32, cl);
      Grads gpu = run(*conv, x, dy, Device::cuda(), kFloat32, cl);
      expect_close(gpu, cpu, 1e-4);
      conv->to(Device::cpu());
    }
  }
}

TEST(ConvGpuTest, Conv2dHalfPrecisionChannelsLast) {
  SKIP_WITHOUT_GPU();
  for (auto [dtype, tol] : {std::pair{kFloat16, 5e-3}, std::pair{kBFloat16, 3e-2}}) {
    SCOPED_TRACE(dtype_name(dtype));
    manual_seed(20);
    auto conv = std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1);
    Tensor x = randn({4, 16, 14, 14});
    Tensor dy = randn({4, 32, 14, 14});
    Grads cpu = run(*conv, x, dy, Device::cpu(), kFloat32, false);
    Grads gpu = run(*conv, x, dy, Device::cuda(), dtype, /*channels_last=*/true);
    expect_close(gpu, cpu, tol);
    conv->to(Device::cpu(), kFloat32);
  }
}

TEST(ConvGpuTest, AlgorithmChoiceIsCachedPerShape) {
  SKIP_WITHOUT_GPU();
  auto conv = std::make_shared<nn::Conv2d>(4, 8, 3, 1, 1);
  conv->to(Device::cuda());
  Tensor x = randn({2, 4, 9, 11}, Device::cuda()).set_requires_grad();
  sum(conv->forward(x)).backward();
  auto before = nn::functional::conv2d_cache_stats(DeviceType::CUDA);
  for (int i = 0; i < 3; ++i) sum(conv->forward(x)).backward();
  auto after = nn::functional::conv2d_cache_stats(DeviceType::CUDA);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.hits, before.hits + 9);  // forward, backward data, backward filter
  // A new shape is a new choice.
  sum(conv->forward(randn({2, 4, 10, 11}, Device::cuda()))).backward();
  EXPECT_GT(nn::functional::conv2d_cache_stats(DeviceType::CUDA).misses, after.misses);
}

TEST(ConvGpuTest, BatchNorm2dMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (bool cl : {false, true}) {
    SCOPED_TRACE(cl ? "nhwc" : "nchw");
    manual_seed(30);
    auto cpu_bn = std::make_shared<nn::BatchNorm2d>(6);
    auto gpu_bn = std::make_shared<nn::BatchNorm2d>(6);
    Tensor x = randn({4, 6, 5, 7}) * 3 + 1, dy = randn({4, 6, 5, 7});
    for (bool training : {true, false}) {
      cpu_bn->train(training);
      gpu_bn->train(training);
      Grads cpu = run(*cpu_bn, x, dy, Device::cpu(), kFloat32, cl);
      Grads gpu = run(*gpu_bn, x, dy, Device::cuda(), kFloat32, cl);
      expect_close(gpu, cpu, 1e-4);
      EXPECT_REL_NEAR(gpu_bn->running_mean.cpu(), cpu_bn->running_mean, 1e-5);
      EXPECT_REL_NEAR(gpu_bn->running_var.cpu(), cpu_bn->running_var, 1e-5);
    }
    EXPECT_EQ(gpu_bn->num_batches_tracked.cpu().item<int64_t>(), 1);
  }
}

TEST(ConvGpuTest, PoolingMatchesCpu) {
  SKIP_WITHOUT_GPU();
  nn::MaxPool2d maxpool(3, 2, 1);
  nn::AdaptiveAvgPool2d avg1(1), avg(nn::Int2{3, 2});
  Tensor x = randn({2, 3, 9, 8});
  for (nn::UnaryModule* m : std::initializer_list<nn::UnaryModule*>{&maxpool, &avg1, &avg}) {
    SCOPED_TRACE(m->name());
    Tensor dy = randn(m->forward(x).shape());
    for (bool cl : {false, true})
      expect_close(run(*m, x, dy, Device::cuda(), kFloat32, cl),
                   run(*m, x, dy, Device::cpu(), kFloat32, cl), 1e-5);
  }
}

}  // namespace
}  // namespace ddp::test
