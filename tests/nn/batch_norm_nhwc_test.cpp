// The CPU batch-norm kernels on NHWC tensors (Note [Batch-norm NHWC loops])
// against the same kernels on contiguous NCHW copies: training forward,
// evaluation forward and backward, f32/f64 and f16/bf16 (computed in f32).
// PyTorch goldens for both layouts are in batch_norm_test.cpp.

#include <gtest/gtest.h>

#include "ddp/nn/functional/batch_norm.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

// [c] values evenly spaced over [lo, hi], f32.
Tensor linspace_like(int64_t c, double lo, double hi) {
  const double step = c > 1 ? (hi - lo) / double(c - 1) : 0.0;
  return arange(0, double(c), 1, DType::f32) * step + lo;
}

struct BnResult {
  Tensor y, dx, dw, db, rm, rv;
};

BnResult run(const Tensor& x_in, const Tensor& dy, bool train) {
  const int64_t c = x_in.size(1);
  Tensor w = linspace_like(c, 0.5, 1.5), b = linspace_like(c, -0.3, 0.2);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor rm = linspace_like(c, -0.1, 0.1), rv = linspace_like(c, 0.8, 1.2);
  Tensor x = x_in.detach();
  x.set_requires_grad(true);
  Tensor y = F::batch_norm(x, rm, rv, w, b, train, 0.1, 1e-5);
  sum(y.to(DType::f64) * dy.to(DType::f64)).backward();
  return {y, x.grad(), w.grad(), b.grad(), rm, rv};
}

void expect_nhwc_matches_nchw(DType dt, const Shape& shape, bool train, double tol) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + (train ? " train" : " eval"));
  Generator gen(5);
  Tensor x = (randn(shape, {}, &gen) * 2.0 + 0.5).to(dt);
  Tensor dy = randn(shape, {}, &gen).to(dt);
  BnResult nchw = run(x, dy, train);
  Tensor x_cl = F::to_channels_last(x);
  BnResult nhwc = run(x_cl, F::to_channels_last(dy), train);
  // The result and the input gradient stay NHWC (when that differs from
  // NCHW at all), in the input's dtype.
  EXPECT_EQ(F::is_channels_last(nhwc.y), F::is_channels_last(x_cl));
  EXPECT_EQ(F::is_channels_last(nhwc.dx), F::is_channels_last(x_cl));
  EXPECT_EQ(nhwc.y.dtype(), dt);
  EXPECT_EQ(nhwc.dx.dtype(), dt);
  EXPECT_LE(scaled_error(nhwc.y, nchw.y), tol);
  EXPECT_LE(scaled_error(nhwc.dx, nchw.dx, 1e-3), tol);
  EXPECT_LE(scaled_error(nhwc.dw, nchw.dw, 1e-3), tol);
  EXPECT_LE(scaled_error(nhwc.db, nchw.db, 1e-3), tol);
  EXPECT_LE(scaled_error(nhwc.rm, nchw.rm), tol);
  EXPECT_LE(scaled_error(nhwc.rv, nchw.rv), tol);
}

// 11 channels (not a multiple of a SIMD width), 2·9·10 = 180 rows (more
// than one block of NHWC rows).
const Shape kShape{2, 11, 9, 10};

TEST(BatchNormNhwc, F32MatchesNchw) {
  expect_nhwc_matches_nchw(DType::f32, kShape, true, 1e-5);
  expect_nhwc_matches_nchw(DType::f32, kShape, false, 1e-6);
}
TEST(BatchNormNhwc, F64MatchesNchw) {
  expect_nhwc_matches_nchw(DType::f64, kShape, true, 1e-12);
  expect_nhwc_matches_nchw(DType::f64, kShape, false, 1e-12);
}
// Half types: both layouts compute in f32 and round once; they may differ
// by a rounding of the output.
TEST(BatchNormNhwc, Bf16MatchesNchw) {
  expect_nhwc_matches_nchw(DType::bf16, kShape, true, 1.0 / 128);
  expect_nhwc_matches_nchw(DType::bf16, kShape, false, 1.0 / 128);
}
TEST(BatchNormNhwc, F16MatchesNchw) {
  expect_nhwc_matches_nchw(DType::f16, kShape, true, 1.0 / 1024);
  expect_nhwc_matches_nchw(DType::f16, kShape, false, 1.0 / 1024);
}

// A half-precision input is computed in f32: against the f32 computation on
// the same (rounded) values, the output is off by one rounding at most.
TEST(BatchNormNhwc, HalfTypesAreComputedInF32) {
  Generator gen(6);
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double u = dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;
    Tensor x = F::to_channels_last((randn(kShape, {}, &gen) * 4.0 + 3.0).to(dt));
    Tensor dy = F::to_channels_last(randn(kShape, {}, &gen).to(dt));
    BnResult low = run(x, dy, true);
    BnResult ref = run(x.to(DType::f32), dy.to(DType::f32), true);
    EXPECT_LE(scaled_error(low.y, ref.y), u);
    EXPECT_LE(scaled_error(low.dx, ref.dx, 1e-3), 2 * u);
    EXPECT_LE(scaled_error(low.dw, ref.dw, 1e-3), 1e-5);
    EXPECT_LE(scaled_error(low.rm, ref.rm), 1e-6);
    EXPECT_LE(scaled_error(low.rv, ref.rv), 1e-6);
  }
}

// The NHWC kernels read a 1x1 spatial size and a batch of one as well.
TEST(BatchNormNhwc, DegenerateShapes) {
  expect_nhwc_matches_nchw(DType::f32, {4, 5, 1, 1}, true, 1e-5);
  expect_nhwc_matches_nchw(DType::f32, {1, 3, 2, 7}, true, 1e-5);
}

}  // namespace
}  // namespace ddp::test
