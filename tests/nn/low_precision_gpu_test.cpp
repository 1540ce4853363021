// GPU paths in f16 / bf16 and NHWC that conv_gpu_test.cpp does not reach
// (label gpu; skipped without a usable GPU), each against the f32 CPU path:
//   - cuDNN BatchNorm (training: batch statistics, running statistics,
//     backward) with f16 and bf16 inputs, NCHW and NHWC;
//   - Conv2d -> BatchNorm2d -> ReLU in NHWC under autocast (bf16 and f16);
//   - max_pool2d in bf16 (and f16), NCHW and NHWC, on values that bf16
//     holds exactly, so forward and backward must agree bit for bit.
//
// Tolerances (relative to the largest reference magnitude): inputs rounded
// to bf16 (8 significant bits) or f16 (11) with f32 statistics give errors of
// a few units of the last place: bf16 ≤ 3e-2, f16 ≤ 5e-3 on outputs (those
// of conv_gpu_test.cpp), twice that on gradients, which sum over a batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "ddp/amp/autocast.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/batch_norm.h"
#include "ddp/nn/conv.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/pooling.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

double rel(const Tensor& got, const Tensor& want) { return scaled_error(got, want, 1e-6); }

struct LowPrecision {
  DType dtype;
  double tol;
};
const LowPrecision kCases[] = {{kFloat16, 5e-3}, {kBFloat16, 3e-2}};

// ---- cuDNN BatchNorm in f16 / bf16 ---------------------------------------------

TEST(BatchNormLowPrecisionGpu, TrainingMatchesF32Cpu) {
  SKIP_WITHOUT_GPU();
  for (const LowPrecision& c : kCases) {
    for (bool nhwc : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(c.dtype) << (nhwc ? " nhwc" : " nchw"));
      manual_seed(40);
      Tensor x = randn({8, 16, 10, 12}) * 2 + 0.5, dy = randn({8, 16, 10, 12});
      nn::BatchNorm2d cpu_bn(16), gpu_bn(16);
      {
        NoGradGuard no_grad;
        Tensor w = rand({16}) + 0.5, b = randn({16});
        for (nn::BatchNorm2d* m : {&cpu_bn, &gpu_bn}) Tensor(m->weight).copy_(w), Tensor(m->bias).copy_(b);
      }
      Tensor xc = x.detach().set_requires_grad();
      Tensor yc = cpu_bn.forward(xc);
      sum(yc * dy).backward();

      gpu_bn.to(Device::cuda(), c.dtype);
      Tensor xg = x.to(Device::cuda(), c.dtype), dyg = dy.to(Device::cuda(), c.dtype);
      if (nhwc) xg = F::to_channels_last(xg), dyg = F::to_channels_last(dyg);
      xg = xg.detach().set_requires_grad();
      Tensor yg = gpu_bn.forward(xg);
      EXPECT_EQ(yg.dtype(), c.dtype);
      EXPECT_EQ(F::is_channels_last(yg), nhwc);
      sum(yg * dyg).backward();

      EXPECT_LE(rel(yg.cpu().to(kFloat32), yc), c.tol);
      EXPECT_LE(rel(xg.grad().cpu().to(kFloat32), xc.grad()), 2 * c.tol);
      EXPECT_LE(rel(gpu_bn.weight.grad().cpu().to(kFloat32), cpu_bn.weight.grad()), 2 * c.tol);
      EXPECT_LE(rel(gpu_bn.bias.grad().cpu().to(kFloat32), cpu_bn.bias.grad()), 2 * c.tol);
      EXPECT_LE(rel(gpu_bn.running_mean.cpu().to(kFloat32), cpu_bn.running_mean), c.tol);
      EXPECT_LE(rel(gpu_bn.running_var.cpu().to(kFloat32), cpu_bn.running_var), c.tol);
      // Eval: the running statistics just learnt, same on both.
      cpu_bn.eval(), gpu_bn.eval();
      Tensor ye = gpu_bn.forward(x.to(Device::cuda(), c.dtype)).cpu().to(kFloat32);
      EXPECT_LE(rel(ye, cpu_bn.forward(x)), c.tol);
    }
  }
}

// ---- conv + BN in NHWC under autocast ------------------------------------------

TEST(ConvBatchNormAutocastGpu, ChannelsLastMatchesF32Cpu) {
  SKIP_WITHOUT_GPU();
  for (const LowPrecision& c : kCases) {
    SCOPED_TRACE(dtype_name(c.dtype));
    manual_seed(41);
    auto make = [] {
      manual_seed(42);  // the same initial weights on both sides
      auto conv = std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1, 1, 1, false);
      auto bn = std::make_shared<nn::BatchNorm2d>(32);
      return std::make_pair(conv, bn);
    };
    auto [conv_c, bn_c] = make();
    auto [conv_g, bn_g] = make();
    conv_g->to(Device::cuda()), bn_g->to(Device::cuda());  // f32 master weights, as in torch AMP
    manual_seed(43);
    Tensor x = randn({4, 16, 14, 14}), dy = randn({4, 32, 14, 14});

    Tensor xg = F::to_channels_last(x.cuda()).detach().set_requires_grad();
    Tensor yg;
    {
      amp::Autocast autocast(DeviceType::CUDA, c.dtype);
      Tensor h = conv_g->forward(xg);
      EXPECT_EQ(h.dtype(), c.dtype) << "autocast runs convolutions in low precision";
      EXPECT_TRUE(F::is_channels_last(h));
      yg = relu(bn_g->forward(h));
    }
    EXPECT_TRUE(F::is_channels_last(yg));
    sum(yg.to(kFloat32) * F::to_channels_last(dy.cuda())).backward();

    // The f32 reference's gradients go through the GPU result's relu mask
    // (yg > 0): elements whose pre-activation is within bf16 rounding of 0
    // are kept on one side and dropped on the other, each changing the
    // gradients by a term of the order of their largest (in bf16 here 15
    // of 25,088 elements: 0.064 on dx and 0.088 on the conv's dW, against
    // 0.002 with the masks shared). Whether the masks differ only near 0 is
    // what the comparison of y checks. See Note [ReLU mask in gradient
    // comparisons] in batch_norm_fusion_gpu_test.cpp.
    Tensor xc = x.detach().set_requires_grad();
    Tensor zc = bn_c->forward(conv_c->forward(xc));
    Tensor yc = relu(zc);
    zc.backward(masked_fill(dy, le(yg.detach().cpu().to(kFloat32), 0.0), 0.0));

    EXPECT_LE(rel(yg.cpu().to(kFloat32), yc), c.tol);
    EXPECT_EQ(xg.grad().dtype(), kFloat32);
    EXPECT_LE(rel(xg.grad().cpu(), xc.grad()), 2 * c.tol);
    EXPECT_EQ(conv_g->weight.grad().dtype(), kFloat32);
    EXPECT_LE(rel(conv_g->weight.grad().cpu(), conv_c->weight.grad()), 2 * c.tol);
    EXPECT_LE(rel(bn_g->weight.grad().cpu(), bn_c->weight.grad()), 2 * c.tol);
    EXPECT_LE(rel(bn_g->running_var.cpu(), bn_c->running_var), c.tol);
  }
}

// ---- max_pool2d in bf16 / f16 and NHWC -----------------------------------------

// 512 distinct multiples of 1/8 in [-32, 32): exact in bf16 and f16, no ties
// inside a window, so the argmax and the routed gradient are unique.
Tensor distinct_values(const Shape& shape, uint32_t seed) {
  std::vector<float> v(512);
  for (int k = 0; k < 512; ++k) v[size_t(k)] = float(k - 256) / 8.0f;
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  v.resize(size_t(shape_numel(shape)));
  return Tensor::from_vector<float>(v, shape);
}

TEST(MaxPoolLowPrecisionGpu, ExactlyTheF32CpuResult) {
  SKIP_WITHOUT_GPU();
  const Shape shape{2, 4, 8, 8};  // 512 values
  Tensor x = distinct_values(shape, 7);
  for (auto [k, s, p] : {std::tuple{3, 2, 1}, std::tuple{2, 2, 0}, std::tuple{3, 1, 1}}) {
    Tensor xc = x.detach().set_requires_grad();
    Tensor yc = F::max_pool2d(xc, k, s, p);
    // Small integers: every sum of them is exact in bf16 too.
    Tensor dy = (rand(yc.shape()) * 8).to(kInt32).to(kFloat32);
    sum(yc * dy).backward();
    for (DType dt : {kBFloat16, kFloat16}) {
      for (bool nhwc : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "k" << k << " s" << s << " p" << p << " "
                                          << dtype_name(dt) << (nhwc ? " nhwc" : " nchw"));
        Tensor xg = x.to(Device::cuda(), dt), dyg = dy.to(Device::cuda(), dt);
        if (nhwc) xg = F::to_channels_last(xg), dyg = F::to_channels_last(dyg);
        xg = xg.detach().set_requires_grad();
        Tensor yg = F::max_pool2d(xg, k, s, p);
        EXPECT_EQ(yg.dtype(), dt);
        EXPECT_EQ(F::is_channels_last(yg), nhwc);  // pooling keeps the layout, as in torch
        sum(yg * dyg).backward();
        EXPECT_EQ(yg.cpu().to(kFloat32).contiguous().to_vector<float>(), yc.to_vector<float>());
        EXPECT_EQ(xg.grad().cpu().to(kFloat32).contiguous().to_vector<float>(),
                  xc.grad().to_vector<float>());
      }
    }
  }
}

}  // namespace
}  // namespace ddp::test
