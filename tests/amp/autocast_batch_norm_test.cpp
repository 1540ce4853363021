// Autocast and BatchNorm: batch_norm's keep_input policy (Note [Autocast
// policy]) runs it in the activation's 16-bit dtype with f32 weight, bias
// and running statistics, computing in f32 inside the kernels; the values
// match the f32 reference to the 16-bit dtype's rounding, in both layouts.

#include <gtest/gtest.h>

#include <optional>

#include "ddp/amp/autocast.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/functional/batch_norm.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/nn.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

struct BnRun {
  Tensor y, dx, dw, db, running_mean, running_var;
};

// One training step of a fresh BatchNorm2d(4) on x (made in x's dtype and
// layout), with a fixed upstream gradient; autocast to `low` when given.
BnRun run_bn(const Tensor& x, const Tensor& dy, std::optional<DType> low) {
  nn::BatchNorm2d bn(4);
  {
    autograd::NoGradGuard no_grad;
    bn.weight.copy_(Tensor::from_vector<float>({0.5f, 1.5f, -1.0f, 2.0f}, {4}));
    bn.bias.copy_(Tensor::from_vector<float>({0.1f, -0.2f, 0.3f, 0.0f}, {4}));
  }
  Tensor xin = x.detach();
  xin.set_requires_grad(true);
  Tensor y;
  if (low) {
    amp::Autocast on(DeviceType::CPU, *low);
    y = bn.forward(xin);
  } else {
    y = bn.forward(xin);
  }
  sum(y.to(DType::f32) * dy).backward();
  return {y, xin.grad(), bn.weight.grad(), bn.bias.grad(), bn.running_mean, bn.running_var};
}

void expect_low_precision_batch_norm(DType low, double u, bool channels_last) {
  Generator gen(31);
  Tensor x32 = randn({3, 4, 5, 6}, {}, &gen) * 3.0 + 1.0;
  Tensor dy = randn({3, 4, 5, 6}, {}, &gen);
  if (channels_last) x32 = F::to_channels_last(x32);
  // The reference sees the same (rounded) input values in f32.
  Tensor x_low = x32.to(low);
  BnRun ref = run_bn(x_low.to(DType::f32), dy, std::nullopt);
  BnRun got = run_bn(x_low, dy, low);

  EXPECT_EQ(got.y.dtype(), low);  // no cast to f32 and back around the op
  EXPECT_EQ(F::is_channels_last(got.y), channels_last);
  EXPECT_EQ(got.dx.dtype(), low);
  EXPECT_EQ(got.dw.dtype(), DType::f32);
  EXPECT_EQ(got.db.dtype(), DType::f32);
  EXPECT_EQ(got.running_mean.dtype(), DType::f32);
  EXPECT_EQ(got.running_var.dtype(), DType::f32);
  // Statistics are f32 sums of the same input values: f32-close.
  EXPECT_LE(scaled_error(got.running_mean, ref.running_mean), 1e-5);
  EXPECT_LE(scaled_error(got.running_var, ref.running_var), 1e-5);
  // Outputs are rounded once to the 16-bit dtype.
  EXPECT_LE(scaled_error(got.y, ref.y), u);
  EXPECT_GT(scaled_error(got.y, ref.y), 0.0);  // it did write the lower precision
  EXPECT_LE(scaled_error(got.dx, ref.dx, 1e-3), 2 * u);
  // dy reaches the kernel in y's 16-bit dtype (rounded once); the sums over
  // it are f32.
  EXPECT_LE(scaled_error(got.dw, ref.dw, 1e-3), u);
  EXPECT_LE(scaled_error(got.db, ref.db, 1e-3), u);
}

TEST(AutocastBatchNorm, Bf16KeepsTheInputDTypeWithF32Statistics) {
  expect_low_precision_batch_norm(DType::bf16, 1.0 / 256, false);
}
TEST(AutocastBatchNorm, F16KeepsTheInputDTypeWithF32Statistics) {
  expect_low_precision_batch_norm(DType::f16, 1.0 / 2048, false);
}
TEST(AutocastBatchNorm, Bf16ChannelsLast) {
  expect_low_precision_batch_norm(DType::bf16, 1.0 / 256, true);
}
TEST(AutocastBatchNorm, F16ChannelsLast) {
  expect_low_precision_batch_norm(DType::f16, 1.0 / 2048, true);
}

// An f32 activation stays f32 (keep_input never raises precision or lowers it).
TEST(AutocastBatchNorm, F32InputStaysF32) {
  Generator gen(32);
  nn::BatchNorm2d bn(4);
  amp::Autocast on(DeviceType::CPU, DType::bf16);
  EXPECT_EQ(bn.forward(randn({2, 4, 3, 3}, {}, &gen)).dtype(), DType::f32);
}

// 16-bit parameters (a model converted to bf16 by hand) are used in f32.
TEST(AutocastBatchNorm, LowPrecisionParametersAreCastToF32) {
  Generator gen(33);
  Tensor x = randn({2, 3, 4, 4}, {}, &gen).to(DType::bf16);
  Tensor w = Tensor::ones({3}, TensorOptions(DType::bf16));
  Tensor b = Tensor::zeros({3}, TensorOptions(DType::bf16));
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  Tensor y;
  {
    amp::Autocast on(DeviceType::CPU, DType::bf16);
    y = F::batch_norm(x, rm, rv, w, b, true);
  }
  EXPECT_EQ(y.dtype(), DType::bf16);
  Tensor want = F::batch_norm(x, Tensor(), Tensor(), w.to(DType::f32), b.to(DType::f32), true);
  EXPECT_LE(scaled_error(y, want), 0.0);
}

}  // namespace
}  // namespace ddp::test
