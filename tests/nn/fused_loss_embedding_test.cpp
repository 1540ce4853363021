// The fused cross-entropy and embedding kernel ops on the CPU: PyTorch's
// values, the composite formula they replace (log_softmax, gather, sums),
// gradcheck in f64, determinism of the embedding gradient, and bad indices
// raised at once with the op, the value and its position.

#include <cmath>
#include <limits>

#include "ddp/autograd/gradcheck.h"
#include "ddp/nn/functional/embedding.h"
#include "ddp/nn/functional/loss.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;
using F::Reduction;

Tensor f64(const std::vector<double>& v, const Shape& s) {
  return Tensor::from_vector(v, s, TensorOptions(DType::f64));
}
Tensor i64(const std::vector<int64_t>& v, const Shape& s) {
  return Tensor::from_vector(v, s, TensorOptions(DType::i64));
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// Values from PyTorch 1.13 (torch.nn.functional.cross_entropy, f64).
const std::vector<double> kLogits = {0.5,   -1.25, 2.0,  0.0, 1.5, 0.25,
                                     -0.75, 3.0,   -2.0, 0.5, 1.0, -0.5};

TEST(FusedCrossEntropy, MatchesPyTorch) {
  Tensor x = f64(kLogits, {3, 4});
  Tensor t = i64({1, -100, 3}, {3});
  EXPECT_NEAR(F::cross_entropy(x, t).item<double>(), 2.8577383349200822, 1e-12);
  EXPECT_NEAR(F::cross_entropy(x, t, Reduction::mean, 0.1).item<double>(), 2.7671133349200825,
              1e-12);
  EXPECT_NEAR(F::cross_entropy(x, t, Reduction::sum).item<double>(), 5.7154766698401644, 1e-12);
  EXPECT_NEAR(F::cross_entropy(x, t, Reduction::sum, 0.1).item<double>(), 5.534226669840165, 1e-12);
  expect_near_all(values(F::cross_entropy(x, t, Reduction::none)),
                  {3.5844986126036624, 0.0, 2.1309780572365025}, 1e-12);
  expect_near_all(values(F::cross_entropy(x, t, Reduction::none, 0.1)),
                  {3.4282486126036624, 0.0, 2.1059780572365026}, 1e-12);
}

TEST(FusedCrossEntropy, GradientMatchesPyTorch) {
  Tensor x = f64(kLogits, {3, 4}).set_requires_grad();
  Tensor t = i64({1, -100, 3}, {3});
  F::cross_entropy(x, t, Reduction::mean, 0.1).backward();
  expect_near_all(values(x.grad()),
                  {0.06734677501605413, -0.4486247110336598, 0.34534841889119217,
                   0.03592951712641353, 0.0, 0.0, 0.0, 0.0, 0.0007451313706761335,
                   0.1488587329319861, 0.2535355751981867, -0.40313943950084896},
                  1e-12);
}

// The composite the kernel replaced: -Σ q · log_softmax(x) with
// q = (1-ε)·one_hot + ε/C, ignored rows 0, in f64 tensor ops.
Tensor composite_per_row(const Tensor& x, const Tensor& t, double eps, int64_t ignore) {
  const int64_t n = x.size(0), C = x.size(1);
  Tensor z = log_softmax(x.to(DType::f64), -1);
  Tensor valid = ne(t, double(ignore));
  Tensor safe = where(valid, t, zeros_like(t));
  Tensor nll = -gather(z, 1, safe.reshape({n, 1})).reshape({n});
  Tensor smooth = -sum(z, {1}) / double(C);
  return (nll * (1.0 - eps) + smooth * eps) * valid.to(DType::f64);
}

TEST(FusedCrossEntropy, MatchesCompositeInEveryDtype) {
  Generator gen(7);
  Tensor x64 = randn({33, 101}, DType::f64, &gen) * 3.0;
  std::vector<int64_t> tv;
  for (int64_t i = 0; i < 33; ++i) tv.push_back(i % 5 == 0 ? 7 : (i * 37) % 101);
  Tensor t = i64(tv, {33});
  for (double eps : {0.0, 0.2}) {
    const std::vector<double> want = values(composite_per_row(x64, t, eps, 7));
    for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " eps " + std::to_string(eps));
      Tensor x = x64.to(dt);
      // Compare with the composite on the rounded logits: the kernel computes
      // in f32 (f64 for f64); only the output rounding to dt remains.
      const std::vector<double> want_dt = values(composite_per_row(x, t, eps, 7));
      const double tol = dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-5 : 2e-2;
      Tensor none = F::cross_entropy(x, t, Reduction::none, eps, 7);
      EXPECT_EQ(none.dtype(), dt);
      expect_near_all(values(none), want_dt, tol * 8);
      double total = 0;
      int64_t valid = 0;
      for (size_t i = 0; i < want_dt.size(); ++i) total += want_dt[i], valid += tv[i] != 7;
      EXPECT_NEAR(F::cross_entropy(x, t, Reduction::sum, eps, 7).item<double>(), total,
                  tol * std::abs(total) + 1e-9);
      EXPECT_NEAR(F::cross_entropy(x, t, Reduction::mean, eps, 7).item<double>(),
                  total / double(valid), tol * std::abs(total / double(valid)) + 1e-9);
      if (dt == DType::f64) expect_near_all(values(none), want, 1e-12);
    }
  }
}

TEST(FusedCrossEntropy, SpatialAndOneDimLogitsKeepTheirShapes) {
  Generator gen(3);
  Tensor x = randn({2, 3, 2, 2}, DType::f64, &gen);
  Tensor t = i64({0, 2, 1, 1, 2, 0, -100, 1}, {2, 2, 2});
  Tensor none = F::cross_entropy(x, t, Reduction::none);
  EXPECT_EQ(none.shape(), (Shape{2, 2, 2}));
  // Row (0, 1, 0): class dim 1 moved last.
  Tensor row = x.select(0, 0).select(1, 1).select(1, 0).reshape({1, 3});
  EXPECT_NEAR(values(none)[2], F::cross_entropy(row, i64({1}, {1})).item<double>(), 1e-12);
  EXPECT_EQ(values(none)[6], 0.0);
  Tensor one = F::cross_entropy(x.select(0, 0).select(1, 0).select(1, 0), i64({2}, {}));
  EXPECT_EQ(one.dim(), 0);
}

TEST(FusedCrossEntropy, AllRowsIgnoredGiveNaNMeanAndZeroGradient) {
  Tensor x = f64(kLogits, {3, 4}).set_requires_grad();
  Tensor t = i64({-100, -100, -100}, {3});
  Tensor loss = F::cross_entropy(x, t);
  EXPECT_TRUE(std::isnan(loss.item<double>()));
  Tensor s = F::cross_entropy(x, t, Reduction::sum);
  EXPECT_EQ(s.item<double>(), 0.0);
  s.backward();
  for (double g : values(x.grad())) EXPECT_EQ(g, 0.0);
}

TEST(FusedCrossEntropy, MaskedLogitsStayFinite) {
  // -inf logits (a masked vocabulary) weigh nothing: the loss is that of the
  // other classes.
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = f64({-inf, 1.0, -inf, 2.0, -inf, -inf}, {1, 6});
  const double want = std::log(std::exp(1.0) + std::exp(2.0)) - 2.0;
  EXPECT_NEAR(F::cross_entropy(x, i64({3}, {1})).item<double>(), want, 1e-12);
}

TEST(FusedCrossEntropy, Gradcheck) {
  Generator gen(11);
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    for (double eps : {0.0, 0.3}) {
      Tensor x = randn({5, 6}, DType::f64, &gen).detach().set_requires_grad();
      Tensor t = i64({0, 5, 2, 3, 2}, {5});
      auto res = autograd::gradcheck(
          [&](const Tensors& in) { return Tensors{F::cross_entropy(in[0], t, r, eps, 3)}; }, {x});
      EXPECT_TRUE(res.ok) << res.message;
    }
  }
  Tensor x4 = randn({2, 3, 2, 2}, DType::f64, &gen).detach().set_requires_grad();
  Tensor t4 = i64({0, 2, 1, 1, 2, 0, 0, 1}, {2, 2, 2});
  auto res = autograd::gradcheck(
      [&](const Tensors& in) { return Tensors{F::cross_entropy(in[0], t4, Reduction::mean, 0.1)}; },
      {x4});
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(FusedCrossEntropy, BadTargetRaisesAtOnceNamingItsPosition) {
  Tensor x = f64(kLogits, {3, 4});
  EXPECT_DDP_ERROR(F::cross_entropy(x, i64({1, 4, 0}, {3})), IndexError,
                   "cross_entropy: target 4 at position 1 is out of range [0, 4)");
  EXPECT_DDP_ERROR(F::cross_entropy(x, i64({1, 0, -1}, {3})), IndexError,
                   "target -1 at position 2");
  // ignore_index itself is never out of range, even when negative.
  EXPECT_NO_THROW(F::cross_entropy(x, i64({1, -5, 0}, {3}), Reduction::mean, 0.0, -5));
  EXPECT_DDP_ERROR(F::cross_entropy(x, i64({1, 0}, {2})), ShapeError, "need a target of shape");
  EXPECT_DDP_ERROR(F::cross_entropy(x, i64({1, 0, 0}, {3}), Reduction::mean, -0.5), ValueError,
                   "label_smoothing must be in [0, 1]");
}

TEST(EmbeddingKernels, ForwardGathersRows) {
  Tensor w = f64({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
  Tensor idx = i64({3, 0, 3, 2}, {2, 2});
  Tensor out = F::embedding(idx, w);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values(out), (std::vector<double>{30, 31, 0, 1, 30, 31, 20, 21}));
  EXPECT_EQ(values(F::embedding(idx.to(DType::i32), w)), values(out));
  EXPECT_EQ(F::embedding(i64({}, {0}), w).shape(), (Shape{0, 2}));
}

TEST(EmbeddingKernels, GradientSumsRepeatedIndicesDeterministically) {
  Generator gen(5);
  Tensor w = randn({6, 3}, DType::f32, &gen).detach().set_requires_grad();
  Tensor idx = i64({4, 1, 4, 4, 0, 1}, {6});
  Tensor g = randn({6, 3}, DType::f32, &gen);
  F::embedding(idx, w).backward(g);
  const std::vector<double> gv = values(g), dw = values(w.grad());
  for (int64_t row = 0; row < 6; ++row)
    for (int64_t j = 0; j < 3; ++j) {
      double want = 0;  // in position order, as the kernel sums (then one rounding)
      for (int64_t i = 0; i < 6; ++i)
        if (values(idx)[size_t(i)] == double(row)) want += gv[size_t(i * 3 + j)];
      EXPECT_NEAR(dw[size_t(row * 3 + j)], want, 1e-6) << "row " << row;
    }
  // Same bits on a second run.
  Tensor w2 = w.detach().clone().set_requires_grad();
  F::embedding(idx, w2).backward(g);
  EXPECT_EQ(values(w2.grad()), dw);
}

TEST(EmbeddingKernels, GradientInBf16AccumulatesInF32) {
  // 512 lookups of one row, each adding 2^-9: a bf16 running sum stops at
  // 0.5 (whose half-ulp 2^-9 rounds back to even); in f32 it is exactly 1.
  Tensor w = Tensor::zeros({2, 1}, TensorOptions(DType::bf16)).set_requires_grad();
  Tensor idx = Tensor::zeros({512}, TensorOptions(DType::i64));
  Tensor g = Tensor::full({512, 1}, 1.0 / 512.0, TensorOptions(DType::bf16));
  F::embedding(idx, w).backward(g);
  EXPECT_EQ(values(w.grad()), (std::vector<double>{1.0, 0.0}));
}

TEST(EmbeddingKernels, Gradcheck) {
  Generator gen(9);
  Tensor w = randn({5, 3}, DType::f64, &gen).detach().set_requires_grad();
  Tensor idx = i64({3, 0, 4, 3, 1, 3}, {2, 3});
  auto res = autograd::gradcheck(
      [&](const Tensors& in) { return Tensors{F::embedding(idx, in[0])}; }, {w});
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(EmbeddingKernels, BadIndexRaisesAtOnceNamingItsPosition) {
  Tensor w = Tensor::zeros({5, 4});
  EXPECT_DDP_ERROR(F::embedding(i64({0, 2, 5}, {3}), w), IndexError,
                   "embedding: index 5 at position 2 is out of range [0, 5)");
  EXPECT_DDP_ERROR(F::embedding(i64({-1, 0}, {2}).to(DType::i32), w), IndexError,
                   "index -1 at position 0");
  EXPECT_DDP_ERROR(F::embedding(Tensor::zeros({2}), w), DTypeError, "index must be an integer");
  EXPECT_DDP_ERROR(F::embedding(i64({0}, {1}), Tensor::zeros({5})), ShapeError,
                   "weight must be [num_embeddings, dim]");
}

}  // namespace
}  // namespace ddp::test
