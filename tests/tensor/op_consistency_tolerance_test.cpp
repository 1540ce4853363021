// The comparison the CUDA op-consistency test and the models' GPU test make
// (compare_scaled in op_consistency_util.h), exercised on the CPU: an error
// is measured against the reference's own scale, so a small output cannot
// hide a large relative error, and the default bounds by dtype are what the
// header argues. Also run_op's per-output gradients, which that test
// compares one by one.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "op_consistency_util.h"

namespace ddp::op_consistency {
namespace {

// Values across [-2, 2) with both signs, times `scale`; f64 so that a
// perturbation is not rounded away.
Tensor spread(double scale, int64_t n = 1000) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = scale * (std::fmod(0.7548776662 * double(i), 1.0) * 4 - 2);
  return Tensor::from_vector(v, {n}, TensorOptions(DType::f64));
}

// `want` with element i moved by `fraction` of the reference's scale.
Tensor off_by(const Tensor& want, int64_t i, double fraction) {
  std::vector<double> v = want.to_vector<double>();
  double s = 0;
  for (double x : v) s = std::max(s, std::abs(x));
  v[size_t(i)] += fraction * s;
  return Tensor::from_vector(v, want.shape(), TensorOptions(DType::f64));
}

TEST(ScaledComparison, HalfBoundsRejectFivePercentAcceptATenthOfAPercent) {
  for (DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const ScaleTolerance tol = default_scaled_tolerance(dt);
    for (double scale : {1.0, 1e-3, 1e-5}) {  // an O(1) output, a mean, a mean loss's gradient
      SCOPED_TRACE("scale " + std::to_string(scale));
      const Tensor want = spread(scale);
      const ScaledComparison bad = compare_scaled(off_by(want, 17, 0.05), want, tol);
      EXPECT_FALSE(bad.ok()) << bad.describe();
      EXPECT_EQ(bad.worst, 17);
      EXPECT_NEAR(bad.relative(), 0.05, 1e-9);
      const ScaledComparison good = compare_scaled(off_by(want, 17, 0.001), want, tol);
      EXPECT_TRUE(good.ok()) << good.describe();
    }
  }
}

TEST(ScaledComparison, DefaultBoundsByDType) {
  // In units of the unit roundoff: 8u for the half types (two ulps of the
  // scale, twice over); f32 and f64 as argued in op_consistency_util.h.
  EXPECT_DOUBLE_EQ(default_scaled_tolerance(DType::f16).rtol, 8.0 / 2048);
  EXPECT_DOUBLE_EQ(default_scaled_tolerance(DType::bf16).rtol, 8.0 / 256);
  EXPECT_DOUBLE_EQ(default_scaled_tolerance(DType::f32).rtol, 1e-4);
  EXPECT_DOUBLE_EQ(default_scaled_tolerance(DType::f64).rtol, 1e-10);
  EXPECT_DOUBLE_EQ(default_scaled_tolerance(DType::f16).atol, std::ldexp(1.0, -24));
  EXPECT_DOUBLE_EQ(default_scaled_tolerance(DType::bf16).atol,
                   double(std::numeric_limits<float>::min()));
  // f32 is held far tighter than the half types: 0.1% of the scale fails.
  const Tensor want = spread(1.0);
  EXPECT_FALSE(
      compare_scaled(off_by(want, 3, 1e-3), want, default_scaled_tolerance(DType::f32)).ok());
  EXPECT_TRUE(
      compare_scaled(off_by(want, 3, 1e-5), want, default_scaled_tolerance(DType::f32)).ok());
}

// What the old comparison let through: a mean of ~1e-3 that is 5% off
// passed an absolute 2e-2 (and max(1, S) scaling); against its own scale it
// fails.
TEST(ScaledComparison, SmallOutputsAreHeldToTheirOwnScale) {
  const Tensor want = spread(1e-3, 64);
  const Tensor got = mul(want, 1.05);
  EXPECT_TRUE(allclose(got, want, 2e-2, 2e-2));  // the old bf16 bound: passes
  for (DType dt : {DType::f16, DType::bf16})
    EXPECT_FALSE(compare_scaled(got, want, default_scaled_tolerance(dt)).ok()) << dtype_name(dt);
}

TEST(ScaledComparison, EntriesMayStateTheirOwnRtol) {
  OpInfo op;
  op.cuda_scaled_tolerance = {{DType::f16, 1e-2}};
  EXPECT_DOUBLE_EQ(scaled_tolerance_for(op, DType::f16).rtol, 1e-2);
  EXPECT_DOUBLE_EQ(scaled_tolerance_for(op, DType::f16).atol, std::ldexp(1.0, -24));
  EXPECT_DOUBLE_EQ(scaled_tolerance_for(op, DType::bf16).rtol, 8.0 / 256);  // not stated: default
}

TEST(ScaledComparison, NonFiniteValuesZerosAndShapes) {
  const ScaleTolerance loose{1.0, 1.0};
  auto vec = [](std::vector<double> v) {
    const int64_t n = int64_t(v.size());
    return Tensor::from_vector(v, {n}, TensorOptions(DType::f64));
  };
  const double inf = INFINITY, nan = NAN;
  EXPECT_FALSE(compare_scaled(vec({1, nan}), vec({1, 2}), loose).ok());  // NaN: infinite error
  EXPECT_FALSE(compare_scaled(vec({1, 2}), vec({1, nan}), loose).ok());
  EXPECT_FALSE(compare_scaled(vec({nan}), vec({nan}), loose).ok());
  EXPECT_TRUE(compare_scaled(vec({1, inf, -inf}), vec({1, inf, -inf}), {0, 0}).ok());
  EXPECT_FALSE(compare_scaled(vec({1, inf}), vec({1, 2}), loose).ok());
  EXPECT_FALSE(compare_scaled(vec({1, 2}), vec({1, 2, 3}), loose).ok());
  // The scale ignores infinities: 1e-3 off against a scale of 1.
  const ScaledComparison c = compare_scaled(vec({1.001, inf}), vec({1, inf}), {2e-3, 0});
  EXPECT_DOUBLE_EQ(c.scale, 1.0);
  EXPECT_TRUE(c.ok()) << c.describe();
  // An all-zero reference takes zeros, or steps below the dtype's resolution.
  const ScaleTolerance f16 = default_scaled_tolerance(DType::f16);
  EXPECT_TRUE(compare_scaled(vec({0, 0}), vec({0, 0}), f16).ok());
  EXPECT_TRUE(compare_scaled(vec({0, std::ldexp(1.0, -24)}), vec({0, 0}), f16).ok());
  EXPECT_FALSE(compare_scaled(vec({0, 1e-6}), vec({0, 0}), f16).ok());
}

// The CUDA test compares each output's own gradients; together they are the
// gradients of the weighted sum of all outputs.
TEST(RunOp, PerOutputGradientsAddUpToTheCombinedOnes) {
  for (const char* name : {"mean", "cross_entropy", "matmul"}) {
    SCOPED_TRACE(name);
    const OpInfo& op = find_op(name);
    const Tensors inputs = sample_on(op.sample, DType::f64, Device::cpu());
    const RunResult combined = run_op(op, inputs, true);
    const RunResult each = run_op(op, inputs, true, /*per_output=*/true);
    EXPECT_TRUE(each.grads.empty());
    ASSERT_EQ(each.outputs.size(), combined.outputs.size());
    ASSERT_EQ(each.output_grads.size(), each.outputs.size());
    for (size_t j = 0; j < combined.grads.size(); ++j) {
      Tensor total;
      for (const Tensors& g : each.output_grads) {
        ASSERT_EQ(g.size(), combined.grads.size());
        if (g[j].defined()) total = total.defined() ? add(total, g[j]) : g[j];
      }
      ASSERT_EQ(total.defined(), combined.grads[j].defined()) << "input " << op.grad_inputs[j];
      if (total.defined()) EXPECT_TRUE(allclose(total, combined.grads[j], 1e-12, 1e-12));
    }
  }
}

}  // namespace
}  // namespace ddp::op_consistency
