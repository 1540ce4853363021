// nn::functional::batch_norm_add_relu and nn::BatchNorm2d::forward_add_relu
// on the CPU (Note [BatchNorm + add + ReLU fusion]): equal, bit for bit, to
// relu(batch_norm(x) + residual) composed of the separate ops, in every
// dtype, layout and mode, gradients and running statistics included;
// gradcheck in f64; whole ResNets with and without the fusion; autocast,
// the SyncBatchNorm hook and bad inputs.

#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "ddp/amp/autocast.h"
#include "ddp/autograd/gradcheck.h"
#include "ddp/autograd/node.h"
#include "ddp/nn/batch_norm.h"
#include "ddp/nn/functional/batch_norm.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/layout_conversions.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/tensor/ops.h"
#include "nn/conv_golden_util.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

// Restores the process-wide fusion switch when a test ends.
struct FusionSwitch {
  explicit FusionSwitch(bool on) { F::set_batch_norm_fusion_enabled(on); }
  ~FusionSwitch() { F::set_batch_norm_fusion_enabled(true); }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         max_abs_error(a.to(DType::f64), b.to(DType::f64)) == 0.0;
}

struct Result {
  Tensor y, dx, dw, db, dr, rm, rv;
};

// One forward and backward, fused or composed; the inputs are copied so
// both runs start alike.
Result run(bool fused, const Tensor& x0, const Tensor& r0, const Tensor& dy, bool training,
           DType dt) {
  const int64_t c = x0.size(1);
  Tensor x = x0.detach().clone();
  if (F::is_channels_last(x0)) x = F::to_channels_last(x);
  x.set_requires_grad();
  Tensor w = (arange(0, double(c), 1, DType::f32) * 0.1 + 0.5).to(dt).set_requires_grad();
  Tensor b = (arange(0, double(c), 1, DType::f32) * -0.05 + 0.1).to(dt).set_requires_grad();
  Tensor rm = (arange(0, double(c), 1, DType::f32) * 0.02).to(dt);
  Tensor rv = (arange(0, double(c), 1, DType::f32) * 0.1 + 0.8).to(dt);
  Tensor r = r0.defined() ? r0.detach().clone() : Tensor();
  if (r.defined() && F::is_channels_last(r0)) r = F::to_channels_last(r);
  if (r.defined()) r.set_requires_grad();
  Tensor y = fused ? F::batch_norm_add_relu(x, rm, rv, w, b, r, training, 0.1, 1e-5)
                   : relu(r.defined() ? add(F::batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5), r)
                                      : F::batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5));
  y.backward(dy);
  return {y, x.grad(), w.grad(), b.grad(), r.defined() ? r.grad() : Tensor(), rm, rv};
}

void expect_fused_equals_composed(const Shape& shape, bool channels_last, DType dt) {
  Generator gen(11);
  for (bool training : {true, false})
    for (bool with_residual : {true, false}) {
      SCOPED_TRACE(std::string(training ? "train" : "eval") +
                   (with_residual ? " + residual" : "") + (channels_last ? " nhwc" : "") + " " +
                   dtype_name(dt));
      Tensor x = randn(shape, {}, &gen).to(dt), dy = randn(shape, {}, &gen).to(dt);
      Tensor r = with_residual ? randn(shape, {}, &gen).to(dt) : Tensor();
      if (channels_last) {
        x = F::to_channels_last(x);
        dy = F::to_channels_last(dy);
        if (r.defined()) r = F::to_channels_last(r);
      }
      const Result f = run(true, x, r, dy, training, dt), c = run(false, x, r, dy, training, dt);
      EXPECT_TRUE(same_bits(f.y, c.y)) << "y: " << max_abs_error(f.y.to(kFloat64), c.y.to(kFloat64));
      EXPECT_EQ(F::is_channels_last(f.y), channels_last);
      EXPECT_TRUE(same_bits(f.dx, c.dx)) << "dx";
      EXPECT_EQ(F::is_channels_last(f.dx), channels_last);
      EXPECT_TRUE(same_bits(f.dw, c.dw)) << "dweight";
      EXPECT_TRUE(same_bits(f.db, c.db)) << "dbias";
      EXPECT_TRUE(same_bits(f.dr, c.dr)) << "dresidual";
      EXPECT_TRUE(same_bits(f.rm, c.rm)) << "running_mean";
      EXPECT_TRUE(same_bits(f.rv, c.rv)) << "running_var";
      // ReLU happened: no negative output, and some zeros.
      EXPECT_GE(min(f.y.to(kFloat64)).item<double>(), 0.0);
    }
}

TEST(BatchNormFusion, EqualsComposedOpsNchw) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    expect_fused_equals_composed({3, 5, 4, 6}, false, dt);
}

TEST(BatchNormFusion, EqualsComposedOpsNhwc) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    expect_fused_equals_composed({3, 5, 4, 6}, true, dt);
}

TEST(BatchNormFusion, EqualsComposedOpsOtherRanks) {
  expect_fused_equals_composed({6, 4}, false, DType::f32);
  expect_fused_equals_composed({2, 3, 7}, false, DType::f32);
}

TEST(BatchNormFusion, RecordsOneNode) {
  Tensor x = randn({2, 3, 4, 4}).set_requires_grad(), r = randn({2, 3, 4, 4});
  Tensor y = F::batch_norm_add_relu(x, Tensor(), Tensor(), Tensor(), Tensor(), r, true);
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "batch_norm_add_relu");
}

TEST(BatchNormFusion, GradcheckF64) {
  manual_seed(5);
  for (bool training : {true, false})
    for (bool channels_last : {false, true}) {
      SCOPED_TRACE(std::string(training ? "train" : "eval") + (channels_last ? " nhwc" : ""));
      // x away from the ReLU's kink: the central differences must not cross it.
      Tensor x = randn({3, 2, 4, 3}, kFloat64).set_requires_grad();
      Tensor w = (rand({2}, kFloat64) + 0.5).detach().set_requires_grad();
      Tensor b = randn({2}, kFloat64).set_requires_grad();
      Tensor r = randn({3, 2, 4, 3}, kFloat64).set_requires_grad();
      Tensor rm = randn({2}, kFloat64), rv = rand({2}, kFloat64) + 0.5;
      auto fn = [&](const Tensors& in) {
        Tensor xi = channels_last ? F::to_channels_last(in[0]) : in[0];
        Tensor ri = channels_last ? F::to_channels_last(in[3]) : in[3];
        return Tensors{F::batch_norm_add_relu(xi, rm.clone(), rv.clone(), in[1], in[2], ri,
                                              training)};
      };
      auto res = autograd::gradcheck(fn, {x, w, b, r});
      EXPECT_TRUE(res.ok) << res.message;
      auto no_residual = [&](const Tensors& in) {
        return Tensors{F::batch_norm_add_relu(in[0], rm.clone(), rv.clone(), in[1], in[2],
                                              Tensor(), training)};
      };
      res = autograd::gradcheck(no_residual, {x, w, b});
      EXPECT_TRUE(res.ok) << res.message;
    }
}

// A residual of another dtype is added as the composed add would: promoted.
TEST(BatchNormFusion, ResidualOfAnotherDtypePromotes) {
  Tensor x = randn({2, 3, 4, 4}), r = randn({2, 3, 4, 4}, kFloat64);
  Tensor y = F::batch_norm_add_relu(x, Tensor(), Tensor(), Tensor(), Tensor(), r, true);
  EXPECT_EQ(y.dtype(), kFloat64);
  Tensor expected = relu(add(F::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true), r));
  EXPECT_TRUE(same_bits(y, expected));
}

// Autocast: batch_norm's keep_input policy for x and the parameters; the
// residual is not cast (the composed add would not cast it either).
TEST(BatchNormFusion, AutocastKeepsInputDtype) {
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(low));
    Tensor x = randn({2, 3, 4, 4}).to(low), r = randn({2, 3, 4, 4}).to(low);
    Tensor w = randn({3}), b = randn({3});  // f32 parameters, as a model under autocast has
    Tensor rm1 = Tensor::zeros({3}), rv1 = Tensor::ones({3});
    Tensor rm2 = rm1.clone(), rv2 = rv1.clone();
    Tensor fused, composed;
    {
      amp::Autocast on(DeviceType::CPU, low);
      fused = F::batch_norm_add_relu(x, rm1, rv1, w, b, r, true);
      composed = relu(add(F::batch_norm(x, rm2, rv2, w, b, true), r));
    }
    EXPECT_EQ(fused.dtype(), low);
    EXPECT_TRUE(same_bits(fused, composed));
    EXPECT_TRUE(same_bits(rm1, rm2));
    EXPECT_EQ(rm1.dtype(), kFloat32);  // running statistics stay as they are
  }
}

TEST(BatchNormFusion, ModuleForwardAddRelu) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "train" : "eval");
    nn::BatchNorm2d fused_bn(3), plain_bn(3);
    fused_bn.train(training);
    plain_bn.train(training);
    Tensor x = randn({2, 3, 4, 4}), r = randn({2, 3, 4, 4});
    Tensor y = fused_bn.forward_add_relu(x, r);
    Tensor expected = relu(add(plain_bn.forward(x), r));
    EXPECT_TRUE(same_bits(y, expected));
    EXPECT_TRUE(same_bits(fused_bn.running_mean, plain_bn.running_mean));
    EXPECT_TRUE(same_bits(fused_bn.running_var, plain_bn.running_var));
    EXPECT_EQ(fused_bn.num_batches_tracked.item<int64_t>(), training ? 1 : 0);
    EXPECT_TRUE(same_bits(fused_bn.forward_add_relu(x), relu(plain_bn.forward(x))));
  }
}

// A training-forward hook (SyncBatchNorm's) is honoured: the fused call
// composes relu(hook(x) + residual).
TEST(BatchNormFusion, ModuleUsesTrainingForwardHook) {
  nn::BatchNorm2d bn(3);
  int calls = 0;
  bn.set_training_forward([&](const Tensor& x, double) {
    ++calls;
    return x * 2.0;
  });
  Tensor x = randn({2, 3, 4, 4}), r = randn({2, 3, 4, 4});
  Tensor y = bn.forward_add_relu(x, r);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(same_bits(y, relu(add(x * 2.0, r))));
  bn.eval();  // the hook is for training only
  bn.forward_add_relu(x, r);
  EXPECT_EQ(calls, 1);
}

TEST(BatchNormFusion, BadInputs) {
  Tensor x = randn({2, 3, 4, 4});
  Tensor c3 = Tensor::zeros({3});
  EXPECT_DDP_ERROR(F::batch_norm_add_relu(x, c3, c3, {}, {}, randn({2, 3, 4, 5}), true),
                   ShapeError, "batch_norm_add_relu: the residual must have the input's shape");
  EXPECT_DDP_ERROR(F::batch_norm_add_relu(x, c3, c3, {}, {}, randn({3, 4, 4}), false), ShapeError,
                   "the residual must have the input's shape [2, 3, 4, 4]");
  EXPECT_DDP_ERROR(F::batch_norm_add_relu(randn({3}), c3, c3, {}, {}, {}, true), ShapeError,
                   "batch_norm_add_relu: expected an input [N, C, ...]");
  EXPECT_DDP_ERROR(F::batch_norm_add_relu(x, c3, c3, Tensor::zeros({4}), {}, {}, true),
                   ShapeError, "per-channel tensors must be [3]");
  EXPECT_DDP_ERROR(F::batch_norm_add_relu(x.to(kInt64), c3, c3, {}, {}, {}, true), DTypeError,
                   "expected a floating input");
  EXPECT_DDP_ERROR(F::batch_norm_add_relu(x, {}, {}, {}, {}, {}, false), ValueError,
                   "running statistics are needed");
  EXPECT_DDP_ERROR(F::batch_norm_add_relu(randn({1, 3, 1, 1}), c3, c3, {}, {}, {}, true),
                   ValueError, "more than 1 value per channel");
  nn::BatchNorm2d bn(3);
  EXPECT_DDP_ERROR(bn.forward_add_relu(randn({2, 4, 4, 4}), randn({2, 4, 4, 4})), ShapeError,
                   "expected an input [N, 3, H, W], got f32[2, 4, 4, 4]");
  // Nothing was counted or changed by the refused calls.
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 0);
}

// ---- whole models: fused and composed give the same step -------------------

struct Step {
  Tensor logits, input_grad;
  std::vector<Tensor> grads, buffers;
};

Step resnet_step(nn::models::ResNet& model, const Tensor& x0, bool fused, bool training) {
  FusionSwitch fusion(fused);
  model.train(training);
  model.zero_grad();
  Tensor x = x0.detach().clone();
  if (F::is_channels_last(x0)) x = F::to_channels_last(x);
  x.set_requires_grad();
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < x.size(0); ++i) labels.push_back(i % 10);
  Step s;
  s.logits = model.forward(x);
  F::cross_entropy(s.logits, Tensor::from_vector(labels, {x.size(0)})).backward();
  s.input_grad = x.grad();
  for (const auto& [name, p] : model.named_parameters()) s.grads.push_back(p.grad());
  for (const auto& [name, b] : model.named_buffers()) s.buffers.push_back(b.clone());
  return s;
}

void expect_same_step(const std::function<std::shared_ptr<nn::models::ResNet>()>& make,
                      const Shape& input, bool channels_last) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(std::string(training ? "train" : "eval") + (channels_last ? " nhwc" : ""));
    manual_seed(21);
    auto a = make();
    manual_seed(21);
    auto b = make();
    Generator gen(3);
    Tensor x = randn(input, {}, &gen);
    if (channels_last) x = F::to_channels_last(x);
    const Step fused = resnet_step(*a, x, true, training);
    const Step composed = resnet_step(*b, x, false, training);
    EXPECT_TRUE(same_bits(fused.logits, composed.logits))
        << max_abs_error(fused.logits, composed.logits);
    EXPECT_TRUE(same_bits(fused.input_grad, composed.input_grad));
    ASSERT_EQ(fused.grads.size(), composed.grads.size());
    for (size_t i = 0; i < fused.grads.size(); ++i)
      EXPECT_TRUE(same_bits(fused.grads[i], composed.grads[i])) << "parameter " << i;
    ASSERT_EQ(fused.buffers.size(), composed.buffers.size());
    for (size_t i = 0; i < fused.buffers.size(); ++i)
      EXPECT_TRUE(same_bits(fused.buffers[i], composed.buffers[i])) << "buffer " << i;
  }
}

TEST(BatchNormFusion, Resnet20StepEqualsComposed) {
  auto make = [] { return nn::models::resnet20({3, 10}); };
  expect_same_step(make, {2, 3, 16, 16}, false);
  expect_same_step(make, {2, 3, 16, 16}, true);
}

TEST(BatchNormFusion, BottleneckResNetStepEqualsComposed) {
  using nn::models::ResNet;
  auto make = [] {
    return std::make_shared<ResNet>(ResNet::Block::bottleneck, std::vector<int64_t>{1, 2, 1, 1},
                                    ResNet::Stem::imagenet, 8, nn::models::ResNetOptions{3, 10});
  };
  expect_same_step(make, {2, 3, 32, 32}, false);
  expect_same_step(make, {2, 3, 32, 32}, true);
}

// The fused op converts no layout on NHWC tensors, forward or backward.
TEST(BatchNormFusion, NhwcConvertsNothing) {
  Tensor x = F::to_channels_last(randn({2, 3, 4, 4})).set_requires_grad();
  Tensor r = F::to_channels_last(randn({2, 3, 4, 4})).set_requires_grad();
  const int64_t before = F::layout_conversion_count();
  Tensor y = F::batch_norm_add_relu(x, Tensor(), Tensor(), Tensor(), Tensor(), r, true);
  y.backward(F::to_channels_last(randn({2, 3, 4, 4})));
  EXPECT_EQ(F::layout_conversion_count() - before, 0);
  EXPECT_TRUE(F::is_channels_last(y));
  EXPECT_TRUE(F::is_channels_last(r.grad()));
}

}  // namespace
}  // namespace ddp::test
