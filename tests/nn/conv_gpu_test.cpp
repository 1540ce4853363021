// GPU tests of the convolution-family layers (label gpu; skipped without a
// usable GPU): CUDA against the CPU on the same inputs and parameters.
//
// Tolerances (rel_error of conv_golden_util.h, relative to the largest
// reference magnitude): f32 ≤ 1e-4 with TF32 off (the f32 tests set it off
// themselves, Note [cuDNN TF32]); f16 ≤ 5e-3 and bf16 ≤ 3e-2 against the f32 CPU result for
// the small channel counts used here (inputs rounded to 11 / 8 significant
// bits, f32 accumulation); gradients get twice that.
#include <memory>

#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/batch_norm.h"
#include "ddp/nn/cudnn.h"
#include "ddp/nn/conv.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/layout_conversions.h"
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
  nn::cudnn::AllowTf32Guard no_tf32(false);
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
  // A new shape is a new plan.
  sum(conv->forward(randn({2, 4, 10, 11}, Device::cuda()))).backward();
  auto reshaped = nn::functional::conv2d_cache_stats(DeviceType::CUDA);
  EXPECT_GT(reshaped.misses, after.misses);
  // So is the other TF32 setting (the engines differ), and the first
  // setting's plans are still there.
  const bool tf32 = nn::cudnn::allow_tf32();
  {
    nn::cudnn::AllowTf32Guard flipped(!tf32);
    conv->forward(x);
  }
  auto flipped = nn::functional::conv2d_cache_stats(DeviceType::CUDA);
  EXPECT_EQ(flipped.misses, reshaped.misses + 1);
  conv->forward(x);
  EXPECT_EQ(nn::functional::conv2d_cache_stats(DeviceType::CUDA).hits, flipped.hits + 1);
}

// A channels-last model (Module::to(MemoryFormat)) on NHWC input: x, w and
// y are all NHWC and neither pass copies anything (no per-call weight
// re-layout; Note [cuDNN convolution]); dw comes back with w's strides.
TEST(ConvGpuTest, ChannelsLastModelCopiesNothing) {
  SKIP_WITHOUT_GPU();
  nn::cudnn::AllowTf32Guard no_tf32(false);
  for (auto [dtype, tol] : {std::pair{kFloat32, 1e-4}, std::pair{kFloat16, 5e-3}}) {
    SCOPED_TRACE(dtype_name(dtype));
    manual_seed(40);
    auto conv = std::make_shared<nn::Conv2d>(8, 16, 3, 1, 1);
    Tensor x = randn({2, 8, 12, 10}), dy = randn({2, 16, 12, 10});
    Grads cpu = run(*conv, x, dy, Device::cpu(), kFloat32, false);
    conv->zero_grad();
    conv->to(Device::cuda(), dtype);
    conv->to(MemoryFormat::channels_last);
    ASSERT_TRUE(is_channels_last(conv->weight));
    Tensor xg = to_channels_last(x.to(Device::cuda(), dtype)).detach().set_requires_grad();
    Tensor dyg = to_channels_last(dy.to(Device::cuda(), dtype));
    const int64_t copies = nn::functional::layout_conversion_count();
    Tensor y = conv->forward(xg);
    y.backward(dyg);
    EXPECT_EQ(nn::functional::layout_conversion_count(), copies);
    EXPECT_TRUE(is_channels_last(y));
    EXPECT_TRUE(is_channels_last(conv->weight.grad()));
    EXPECT_REL_NEAR(y.cpu().to(kFloat32), cpu.y, tol);
    EXPECT_REL_NEAR(xg.grad().cpu().to(kFloat32), cpu.dx, 2 * tol);
    EXPECT_REL_NEAR(conv->weight.grad().cpu().to(kFloat32), cpu.dparams[0], 2 * tol);
    EXPECT_REL_NEAR(conv->bias.grad().cpu().to(kFloat32), cpu.dparams[1], 2 * tol);
    conv->to(MemoryFormat::contiguous);
    conv->to(Device::cpu(), kFloat32);
  }
}

// A weight whose layout differs from x's is described as it is, or (no
// engine) copied into x's layout and counted: either way the values hold.
TEST(ConvGpuTest, WeightLayoutDifferentFromInput) {
  SKIP_WITHOUT_GPU();
  nn::cudnn::AllowTf32Guard no_tf32(false);
  manual_seed(41);
  Tensor x = randn({2, 8, 9, 7}), w = randn({16, 8, 3, 3}), dy = randn({2, 16, 9, 7});
  auto reference = [&](const Tensor& xin, const Tensor& win) {
    Tensor xl = xin.detach().set_requires_grad(), wl = win.detach().set_requires_grad();
    Tensor y = nn::functional::conv2d(xl, wl, {}, {.padding = 1});
    y.backward(xin.is_cuda() ? dy.cuda() : dy);
    return Tensors{y.cpu().contiguous(), xl.grad().cpu().contiguous(),
                   wl.grad().cpu().contiguous()};
  };
  Tensors want = reference(x, w);
  for (bool x_nhwc : {false, true}) {
    SCOPED_TRACE(x_nhwc ? "x NHWC, w NCHW" : "x NCHW, w NHWC");
    Tensor xg = x.cuda(), wg = w.cuda();
    if (x_nhwc) xg = to_channels_last(xg); else wg = to_channels_last(wg);
    Tensors got = reference(xg, wg);
    for (size_t i = 0; i < 3; ++i) EXPECT_REL_NEAR(got[i], want[i], i == 0 ? 1e-4 : 2e-4);
  }
}

// TF32 off: f32 agrees with an f64 reference to f32 rounding; on: to TF32
// rounding (10-bit mantissa inputs). A long reduction (C·KH·KW = 576) makes
// the two bounds far apart.
TEST(ConvGpuTest, Tf32SwitchIsRespected) {
  SKIP_WITHOUT_GPU();
  manual_seed(42);
  Tensor x = randn({4, 64, 16, 16}), w = randn({64, 64, 3, 3});
  Tensor want = nn::functional::conv2d(x.to(kFloat64), w.to(kFloat64), {}, {.padding = 1});
  auto error = [&](bool tf32) {
    nn::cudnn::AllowTf32Guard guard(tf32);
    Tensor y = nn::functional::conv2d(to_channels_last(x.cuda()), to_channels_last(w.cuda()), {},
                                      {.padding = 1});
    return rel_error(y.cpu().to(kFloat64), want);
  };
  const double off = error(false), on = error(true);
  RecordProperty("tf32_off_error", std::to_string(off));
  RecordProperty("tf32_on_error", std::to_string(on));
  EXPECT_LE(off, 1e-5) << "TF32 off must give f32 accuracy";
  EXPECT_LE(on, 5e-3) << "TF32 bound";
}

// conv2d_bias_relu: fused on CUDA for grad-free inputs (the plan cached on
// the first call), equal to relu(conv2d(...)); with gradients it composes.
TEST(ConvGpuTest, FusedConvBiasReluMatchesComposed) {
  SKIP_WITHOUT_GPU();
  nn::cudnn::AllowTf32Guard no_tf32(false);
  namespace F = nn::functional;
  manual_seed(43);
  Tensor x = randn({4, 16, 14, 14}), w = randn({32, 16, 3, 3}), b = randn({32});
  for (auto [dtype, tol] : {std::pair{kFloat32, 1e-4}, std::pair{kFloat16, 5e-3}}) {
    for (bool cl : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << (cl ? " nhwc" : " nchw"));
      Tensor xg = x.to(Device::cuda(), dtype), wg = w.to(Device::cuda(), dtype);
      if (cl) xg = to_channels_last(xg), wg = to_channels_last(wg);
      Tensor bg = b.to(Device::cuda(), dtype);
      Tensor composed = relu(F::conv2d(xg, wg, bg, {.padding = 1}));
      const int64_t unfused = F::conv2d_bias_relu_unfused_count();
      Tensor fused = F::conv2d_bias_relu(xg, wg, bg, {.padding = 1});
      auto before = F::conv2d_cache_stats(DeviceType::CUDA);
      Tensor again = F::conv2d_bias_relu(xg, wg, bg, {.padding = 1});
      auto after = F::conv2d_cache_stats(DeviceType::CUDA);
      EXPECT_EQ(after.misses, before.misses);
      EXPECT_GE(after.hits, before.hits + 1);
      // The canonical tensor-core case must really fuse.
      if (dtype == kFloat16 && cl) EXPECT_EQ(F::conv2d_bias_relu_unfused_count(), unfused);
      EXPECT_EQ(is_channels_last(fused), cl);
      EXPECT_REL_NEAR(fused.cpu().to(kFloat32), composed.cpu().to(kFloat32), tol);
      EXPECT_EQ(max_abs_error(fused.cpu(), again.cpu()), 0.0);
      EXPECT_GE(min(fused.cpu().to(kFloat32)).item<float>(), 0.0f);
    }
  }
  // Gradients needed: composed, and differentiable.
  Tensor xr = x.cuda().set_requires_grad();
  const int64_t unfused = F::conv2d_bias_relu_unfused_count();
  sum(F::conv2d_bias_relu(xr, w.cuda(), b.cuda(), {.padding = 1})).backward();
  EXPECT_EQ(F::conv2d_bias_relu_unfused_count(), unfused + 1);
  Tensor xc = x.detach().set_requires_grad();
  sum(relu(F::conv2d(xc, w, b, {.padding = 1}))).backward();
  EXPECT_REL_NEAR(xr.grad().cpu(), xc.grad(), 2e-4);
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
