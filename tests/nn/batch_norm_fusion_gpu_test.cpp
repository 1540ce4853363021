// GPU tests of batch_norm and batch_norm_add_relu through cuDNN's graph API
// (Note [cuDNN batch norm graphs]; label gpu, skipped without a usable GPU):
// CUDA against the CPU on the same inputs, NHWC and NCHW, f32/f16/bf16 (the
// graphs) and f64 (the legacy fallback), with and without a residual, in
// training and eval; the fused op against the composed ops on CUDA; a ResNet
// bottleneck step with and without the fusion; a momentum that changes every
// step (momentum = nullopt, past the graph cache's limit).
//
// Tolerances as conv_gpu_test.cpp's, relative to the largest reference
// magnitude: f32 1e-4, f16 5e-3, bf16 3e-2 against the f32 CPU result;
// gradients twice that.
//
// Note [ReLU mask in gradient comparisons]
// relu's derivative is a step at 0: an element whose pre-activation lies
// within rounding of 0 (bn + residual ~ 0) can be kept on one side and
// dropped on the other, and its gradient then differs by |dy| * w * invstd,
// of the order of the largest gradient, however good both results are.
// Two correct computations disagree on such elements whenever they round
// differently: the f32 reference and a bf16/f16 graph (or the legacy
// fallback, which rounds the bn result to the data dtype before the add,
// as the composed ops do); the fused graph (bn kept in f32 before the add)
// and the composed ops; even two f32 formulas, on a tensor of millions of
// elements. (The first GPU run failed on exactly these: 1 to a few
// thousand flipped elements, dx/dresidual off by 0.3-0.9 of their largest
// value, dw/db by a few flipped terms of their sums.) So where a relu is
// involved the reference takes its derivative with the mask of the result
// under test (y > 0, the mask its backward used): the reference's
// gradients are those of batch_norm (+ residual) composed on the CPU,
// pulled back through that mask. The masks themselves may differ only
// where y is within the output tolerance of 0, which the comparison of y
// checks.

#include <memory>

#include "ddp/nn/batch_norm.h"
#include "ddp/nn/functional/batch_norm.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"
#include "nn/conv_golden_util.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason()

double tolerance(DType dt) {
  switch (dt) {
    case DType::f16: return 5e-3;
    case DType::bf16: return 3e-2;
    case DType::f64: return 1e-10;
    default: return 1e-4;
  }
}

struct Out {
  Tensor y, dx, dw, db, dr, rm, rv;
};

// The fused op (or batch_norm when !fused) on `device` in dtype dt; outputs
// as f64 CPU tensors. Parameters and statistics are f32, as in a model under
// autocast (f64 for f64 data). With relu_mask_of (an output y of the op
// under test, as run() returns it), the computation has a relu (fused, or
// a residual), and the gradients are taken through the mask
// relu_mask_of > 0 instead of this run's own (Note [ReLU mask in gradient
// comparisons]): batch_norm (+ residual) composed, then relu for y, and
// the backward from the pre-activation with dy masked.
Out run(bool fused, const Tensor& x_cpu, const Tensor& r_cpu, const Tensor& dy_cpu, Device device,
        DType dt, bool channels_last, bool training, const Tensor& relu_mask_of = Tensor()) {
  const int64_t c = x_cpu.size(1);
  const DType pdt = dt == DType::f64 ? DType::f64 : DType::f32;
  auto place = [&](const Tensor& t) {
    Tensor d = t.to(device, dt);
    return channels_last ? F::to_channels_last(d) : d.contiguous();
  };
  Tensor x = place(x_cpu).detach().set_requires_grad();
  Tensor r = r_cpu.defined() ? place(r_cpu).detach().set_requires_grad() : Tensor();
  Tensor w = (arange(0, double(c), 1, pdt) * 0.01 + 0.5).to(device).set_requires_grad();
  Tensor b = (arange(0, double(c), 1, pdt) * -0.01 + 0.2).to(device).set_requires_grad();
  Tensor rm = (arange(0, double(c), 1, pdt) * 0.001).to(device);
  Tensor rv = (arange(0, double(c), 1, pdt) * 0.01 + 0.9).to(device);
  Tensor y;
  if (relu_mask_of.defined() && (fused || r.defined())) {
    Tensor z = F::batch_norm(x, rm, rv, w, b, training);
    if (r.defined()) z = add(z, r);
    y = relu(z);
    z.backward(place(masked_fill(dy_cpu, le(relu_mask_of, 0.0), 0.0)));
  } else {
    y = fused ? F::batch_norm_add_relu(x, rm, rv, w, b, r, training)
              : F::batch_norm(x, rm, rv, w, b, training);
    if (!fused && r.defined()) y = relu(add(y, r));
    y.backward(place(dy_cpu));
  }
  EXPECT_EQ(F::is_channels_last(y), channels_last);
  auto host = [](const Tensor& t) { return t.defined() ? t.cpu().to(DType::f64) : t; };
  return {host(y),         host(x.grad()), host(w.grad()), host(b.grad()),
          r.defined() ? host(r.grad()) : Tensor(), host(rm), host(rv)};
}

void expect_close(const Out& got, const Out& want, double tol) {
  EXPECT_REL_NEAR(got.y, want.y, tol);
  EXPECT_REL_NEAR(got.dx, want.dx, 2 * tol);
  EXPECT_REL_NEAR(got.dw, want.dw, 2 * tol);
  EXPECT_REL_NEAR(got.db, want.db, 2 * tol);
  if (want.dr.defined()) EXPECT_REL_NEAR(got.dr, want.dr, 2 * tol);
  EXPECT_REL_NEAR(got.rm, want.rm, tol);
  EXPECT_REL_NEAR(got.rv, want.rv, tol);
}

// CUDA (graphs, or the legacy calls for f64) against the CPU in f32/f64.
void check_against_cpu(const Shape& shape, bool channels_last) {
  Generator gen(5);
  Tensor x = randn(shape, {}, &gen), dy = randn(shape, {}, &gen), r = randn(shape, {}, &gen);
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
    for (bool training : {true, false})
      for (bool fused : {true, false})
        for (bool with_residual : {true, false}) {
          if (!fused && with_residual) continue;
          SCOPED_TRACE(std::string(dtype_name(dt)) + (training ? " train" : " eval") +
                       (fused ? " fused" : " batch_norm") + (with_residual ? " + residual" : "") +
                       (channels_last ? " nhwc" : " nchw"));
          const Tensor res = with_residual ? r : Tensor();
          const DType ref_dt = dt == DType::f64 ? DType::f64 : DType::f32;
          const Out got = run(fused, x, res, dy, Device::cuda(0), dt, channels_last, training);
          // The reference sees the same rounded inputs, and the relu mask of
          // the result under test (Note [ReLU mask in gradient comparisons]).
          const Out want = run(fused, x.to(dt).to(ref_dt), res.defined() ? res.to(dt).to(ref_dt) : res,
                               dy.to(dt).to(ref_dt), Device::cpu(), ref_dt, channels_last, training,
                               got.y);
          expect_close(got, want, tolerance(dt));
        }
}

TEST(BatchNormFusionGpu, ResNet50LayerNhwcMatchesCpu) {
  SKIP_WITHOUT_GPU();
  check_against_cpu({8, 256, 56, 56}, true);
}

TEST(BatchNormFusionGpu, NchwAndOddShapesMatchCpu) {
  SKIP_WITHOUT_GPU();
  check_against_cpu({4, 64, 28, 28}, false);
  check_against_cpu({3, 5, 7, 9}, true);
  check_against_cpu({3, 5, 7, 9}, false);
}

// On CUDA the fused graph and the composed ops agree (the graph keeps the bn
// result in f32 before the add, so equality is to the dtype's tolerance);
// the composed gradients through the fused result's relu mask (Note [ReLU
// mask in gradient comparisons]: in bf16 the two round the bn result
// differently before the add, and disagree on the mask of a few in 10,000
// elements).
TEST(BatchNormFusionGpu, FusedMatchesComposedOnCuda) {
  SKIP_WITHOUT_GPU();
  Generator gen(6);
  const Shape shape{16, 128, 28, 28};
  Tensor x = randn(shape, {}, &gen), dy = randn(shape, {}, &gen), r = randn(shape, {}, &gen);
  for (DType dt : {DType::f32, DType::bf16})
    for (bool training : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (training ? " train" : " eval"));
      const Out fused = run(true, x, r, dy, Device::cuda(0), dt, true, training);
      const Out composed = run(false, x, r, dy, Device::cuda(0), dt, true, training, fused.y);
      expect_close(fused, composed, tolerance(dt));
    }
}

// A bottleneck ResNet step on CUDA, NHWC, with and without the fusion.
TEST(BatchNormFusionGpu, BottleneckStepWithAndWithoutFusion) {
  SKIP_WITHOUT_GPU();
  using nn::models::ResNet;
  auto step = [](bool fused) {
    F::set_batch_norm_fusion_enabled(fused);
    manual_seed(8);
    ResNet model(ResNet::Block::bottleneck, {1, 1, 1, 1}, ResNet::Stem::imagenet, 16, {3, 10});
    model.to(Device::cuda(0));
    Generator gen(9);
    Tensor x = F::to_channels_last(randn({4, 3, 64, 64}, {}, &gen).cuda()).set_requires_grad();
    Tensor labels = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4}, {4}).cuda();
    Tensor logits = model.forward(x);
    F::cross_entropy(logits, labels).backward();
    F::set_batch_norm_fusion_enabled(true);
    return std::make_pair(logits.cpu(), x.grad().cpu());
  };
  auto [y_fused, dx_fused] = step(true);
  auto [y_plain, dx_plain] = step(false);
  EXPECT_REL_NEAR(y_fused, y_plain, 1e-4);
  EXPECT_REL_NEAR(dx_fused, dx_plain, 2e-4);
}

// momentum = nullopt changes the factor every step; past the graph cache's
// limit on momenta the legacy call takes over, with the same statistics.
TEST(BatchNormFusionGpu, CumulativeMomentumOverManySteps) {
  SKIP_WITHOUT_GPU();
  nn::BatchNorm2d gpu_bn(8, 1e-5, std::nullopt), cpu_bn(8, 1e-5, std::nullopt);
  gpu_bn.to(Device::cuda(0));
  Generator gen(10);
  for (int step = 0; step < 12; ++step) {
    Tensor x = randn({4, 8, 6, 6}, {}, &gen);
    Tensor r = randn({4, 8, 6, 6}, {}, &gen);
    Tensor y_gpu = gpu_bn.forward_add_relu(x.cuda(), r.cuda());
    Tensor y_cpu = cpu_bn.forward_add_relu(x, r);
    EXPECT_REL_NEAR(y_gpu.cpu(), y_cpu, 1e-4) << "step " << step;
  }
  EXPECT_REL_NEAR(gpu_bn.running_mean.cpu(), cpu_bn.running_mean, 1e-4);
  EXPECT_REL_NEAR(gpu_bn.running_var.cpu(), cpu_bn.running_var, 1e-4);
}

}  // namespace
}  // namespace ddp::test
