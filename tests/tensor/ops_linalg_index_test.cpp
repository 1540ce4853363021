// Hand-computed values for matmul/bmm, softmax, and the joining and indexing
// ops of ops.h, and one test per error path (each raises its specific
// ddp::Error subclass with a message that names the op).

#include <cmath>
#include <string>
#include <vector>

#include "tensor/ops_test_util.h"

namespace ddp {
namespace {

using namespace test_ops;

// ---- linear algebra ----------------------------------------------------------------

// Reference product on the host for one [M, K] x [K, N] pair.
std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<double>& b,
                               int64_t M, int64_t K, int64_t N) {
  std::vector<double> c(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) c[size_t(i * N + j)] += a[size_t(i * K + k)] * b[size_t(k * N + j)];
  return c;
}

TEST(OpsLinalg, Matmul2D) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3}), b = f32({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  expect_values(c, {58, 64, 139, 154});
  expect_values(matmul(b.t(), a.t()), {58, 139, 64, 154});  // transposed operands
}

TEST(OpsLinalg, MatmulShapes) {
  Tensor v = f32({1, 2, 3}, {3});
  Tensor dot = matmul(v, v);
  EXPECT_EQ(dot.dim(), 0);
  expect_values(dot, {14});
  Tensor m = f32({1, 0, 0, 0, 1, 0}, {2, 3});
  Tensor mv = matmul(m, v);
  EXPECT_EQ(mv.shape(), (Shape{2}));
  expect_values(mv, {1, 2});
  Tensor vm = matmul(v, m.t());
  EXPECT_EQ(vm.shape(), (Shape{2}));
  expect_values(vm, {1, 2});
  EXPECT_EQ(matmul(Tensor::ones({4, 2, 3}), v).shape(), (Shape{4, 2}));
  EXPECT_EQ(matmul(v, Tensor::ones({4, 3, 5})).shape(), (Shape{4, 5}));
  EXPECT_EQ(matmul(Tensor::ones({2, 1, 3, 4}), Tensor::ones({5, 4, 2})).shape(),
            (Shape{2, 5, 3, 2}));
  Tensor empty_k = matmul(Tensor::ones({2, 0}), Tensor::ones({0, 3}));
  expect_values(empty_k, {0, 0, 0, 0, 0, 0});
}

TEST(OpsLinalg, MatmulBroadcastValues) {
  Generator gen(7);
  Tensor a = randn({2, 1, 3, 4}, kFloat64, &gen), b = randn({5, 4, 2}, kFloat64, &gen);
  Tensor c = matmul(a, b);
  ASSERT_EQ(c.shape(), (Shape{2, 5, 3, 2}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      auto ref = matmul_ref(values(a.select(0, i).select(0, 0)), values(b.select(0, j)), 3, 4, 2);
      expect_values(c.select(0, i).select(0, j), ref, 1e-12);
    }
}

TEST(OpsLinalg, MatmulGradients) {
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3}, true), b = f64({1, -1, 2}, {3}, true);
  sum(matmul(a, b)).backward();
  expect_values(a.grad(), {1, -1, 2, 1, -1, 2});
  expect_values(b.grad(), {5, 7, 9});
  Generator gen(3);
  Tensor x = randn({2, 1, 3, 4}, kFloat64, &gen).set_requires_grad(true);
  Tensor y = randn({5, 4, 2}, kFloat64, &gen).set_requires_grad(true);
  auto r = autograd::gradcheck([](const Tensors& in) { return Tensors{matmul(in[0], in[1])}; },
                               {x, y});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor v = randn({4}, kFloat64, &gen).set_requires_grad(true);
  r = autograd::gradcheck(
      [](const Tensors& in) { return Tensors{matmul(in[1], in[0]), matmul(in[1], in[1])}; },
      {y, v});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(OpsLinalg, Bmm) {
  Tensor a = f32({1, 2, 3, 4, 1, 0, 0, 1}, {2, 2, 2});
  Tensor b = f32({1, 1, 0, 1, 5, 6, 7, 8}, {2, 2, 2});
  Tensor c = bmm(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 2, 2}));
  expect_values(c, {1, 3, 3, 7, 5, 6, 7, 8});
  Tensor x = f64({1, 2, 3, 4}, {1, 2, 2}, true), y = f64({1, 0, 0, 1}, {1, 2, 2}, true);
  sum(bmm(x, y)).backward();
  expect_values(x.grad(), {1, 1, 1, 1});
  expect_values(y.grad(), {4, 4, 6, 6});
}

TEST(OpsLinalg, Errors) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_OP_ERROR(matmul(a, a), ShapeError, "matmul");
  EXPECT_OP_ERROR(matmul(a, a), ShapeError, "f32[2, 3] on cpu");
  EXPECT_OP_ERROR(matmul(Tensor::scalar(1.0), a), ShapeError, "matmul");
  EXPECT_OP_ERROR(matmul(Tensor::ones({2, 2, 3}), Tensor::ones({3, 3, 1})), ShapeError, "matmul");
  EXPECT_OP_ERROR(matmul(i32({1, 2}, {2}), i32({1, 2}, {2})), DTypeError, "matmul");
  EXPECT_OP_ERROR(matmul(a, a.t().to(kFloat64)), DTypeError, "matmul");
  EXPECT_OP_ERROR(matmul(a, fake_cuda({3, 2})), DeviceError, "matmul");
  EXPECT_OP_ERROR(bmm(a, a), ShapeError, "bmm");
  EXPECT_OP_ERROR(bmm(Tensor::ones({2, 2, 3}), Tensor::ones({3, 3, 2})), ShapeError, "bmm");
  EXPECT_OP_ERROR(bmm(Tensor::ones({1, 2, 3}), Tensor::ones({1, 2, 3})), ShapeError, "bmm");
}

// ---- softmax ----------------------------------------------------------------------------

TEST(OpsSoftmax, RowsSumToOneAndMatchLogSoftmax) {
  Generator gen(11);
  Tensor x = randn({3, 4, 5}, kFloat64, &gen);
  for (int64_t dim : {-1, 1, 0}) {
    Tensor s = softmax(x, dim);
    EXPECT_EQ(s.shape(), x.shape());
    expect_values(sum(s, {dim}), std::vector<double>(size_t(x.numel() / x.size(dim)), 1.0), 1e-12);
    EXPECT_TRUE(allclose(exp(log_softmax(x, dim)), s, 1e-12, 1e-14)) << "dim " << dim;
  }
  expect_values(softmax(f64({0, std::log(3.0)}, {2})), {0.25, 0.75}, 1e-12);
  expect_values(log_softmax(f64({1, 1}, {2})), {std::log(0.5), std::log(0.5)}, 1e-12);
}

TEST(OpsSoftmax, Gradients) {
  Generator gen(12);
  Tensor x = randn({3, 4}, kFloat64, &gen).set_requires_grad(true);
  for (int64_t dim : {0, 1}) {
    auto r = autograd::gradcheck(
        [dim](const Tensors& in) {
          return Tensors{softmax(in[0], dim), log_softmax(in[0], dim)};
        },
        {x});
    EXPECT_TRUE(r.ok) << "dim " << dim << ": " << r.message;
  }
}

TEST(OpsSoftmax, Errors) {
  EXPECT_OP_ERROR(softmax(i32({1, 2}, {2})), DTypeError, "softmax");
  EXPECT_OP_ERROR(log_softmax(f32({1, 2}, {2}), 1), IndexError, "log_softmax");
}

// ---- joining and indexing --------------------------------------------------------------

TEST(OpsIndexing, CatAndStack) {
  Tensor a = f32({1, 2, 3, 4}, {2, 2}), b = f32({5, 6}, {1, 2});
  Tensor c = cat({a, b});
  EXPECT_EQ(c.shape(), (Shape{3, 2}));
  expect_values(c, {1, 2, 3, 4, 5, 6});
  Tensor d = cat({a, b.t()}, -1);
  EXPECT_EQ(d.shape(), (Shape{2, 3}));
  expect_values(d, {1, 2, 5, 3, 4, 6});
  Tensor s = stack({a, a * 10.0});
  EXPECT_EQ(s.shape(), (Shape{2, 2, 2}));
  expect_values(s, {1, 2, 3, 4, 10, 20, 30, 40});
  Tensor s1 = stack({b.select(0, 0), b.select(0, 0)}, 1);
  EXPECT_EQ(s1.shape(), (Shape{2, 2}));
  expect_values(s1, {5, 5, 6, 6});
  EXPECT_EQ(stack({a, a, a}, -1).shape(), (Shape{2, 2, 3}));
}

TEST(OpsIndexing, CatAndStackGradients) {
  Tensor a = f64({1, 2, 3, 4}, {2, 2}, true), b = f64({5, 6}, {2, 1}, true);
  Tensor w = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  sum(mul(cat({a, b}, 1), w)).backward();
  expect_values(a.grad(), {1, 2, 4, 5});
  expect_values(b.grad(), {3, 6});
  Tensor x = f64({1, 2}, {2}, true), y = f64({3, 4}, {2}, true);
  sum(mul(stack({x, y}, 1), f64({1, 2, 3, 4}, {2, 2}))).backward();
  expect_values(x.grad(), {1, 3});
  expect_values(y.grad(), {2, 4});
}

TEST(OpsIndexing, IndexSelectGatherScatterAdd) {
  Tensor x = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(index_select(x, 1, i64({2, 0, 2}, {3})), {3, 1, 3, 6, 4, 6});
  expect_values(index_select(x, 0, i32({1}, {1})), {4, 5, 6});
  EXPECT_EQ(index_select(x, 0, i64({1}, {})).shape(), (Shape{1, 3}));
  expect_values(gather(x, 1, i64({2, 2, 0, 1}, {2, 2})), {3, 3, 4, 5});
  expect_values(gather(x, 0, i32({1, 0, 1}, {1, 3})), {4, 2, 6});
  Tensor base = Tensor::zeros({2, 3});
  Tensor sa = scatter_add(base, 1, i64({0, 0, 2, 1}, {2, 2}), f32({1, 2, 3, 4}, {2, 2}));
  expect_values(sa, {3, 0, 0, 0, 4, 3});  // duplicates accumulate
  expect_values(base, {0, 0, 0, 0, 0, 0});  // out of place
  // src larger than index: only the covered part is used.
  Tensor big = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(scatter_add(Tensor::zeros({1, 3}), 1, i64({2}, {1, 1}), big), {0, 0, 1});
  Tensor n = scatter_add(i32({1, 1}, {2}), 0, i64({1, 1}, {2}), i32({5, 6}, {2}));
  EXPECT_EQ(n.dtype(), kInt32);
  expect_values(n, {1, 12});
}

TEST(OpsIndexing, IndexingGradients) {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3}, true);
  sum(index_select(x, 1, i64({2, 0, 2}, {3}))).backward();
  expect_values(x.grad(), {1, 0, 2, 1, 0, 2});
  Tensor y = f64({1, 2, 3, 4}, {2, 2}, true);
  sum(mul(gather(y, 1, i64({1, 1, 0}, {1, 3})), 2.0)).backward();
  expect_values(y.grad(), {2, 4, 0, 0});
  Tensor base = f64({0, 0, 0}, {3}, true), src = f64({1, 2}, {2}, true);
  sum(mul(scatter_add(base, 0, i64({2, 2}, {2}), src), f64({1, 2, 3}, {3}))).backward();
  expect_values(base.grad(), {1, 2, 3});
  expect_values(src.grad(), {3, 3});
}

TEST(OpsIndexing, OneHot) {
  Tensor h = one_hot(i64({0, 2, 1}, {3}), 4);
  EXPECT_EQ(h.dtype(), kInt64);
  EXPECT_EQ(h.shape(), (Shape{3, 4}));
  expect_values(h, {1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0});
  Tensor inferred = one_hot(i32({1, 3}, {2, 1}));
  EXPECT_EQ(inferred.shape(), (Shape{2, 1, 4}));
  expect_values(inferred, {0, 1, 0, 0, 0, 0, 0, 1});
}

TEST(OpsIndexing, Errors) {
  Tensor a = f32({1, 2, 3, 4}, {2, 2});
  EXPECT_OP_ERROR(cat({}), ValueError, "cat");
  EXPECT_OP_ERROR(cat({a, a.to(kFloat64)}), DTypeError, "cat");
  EXPECT_OP_ERROR(cat({a, Tensor::ones({2, 3})}, 0), ShapeError, "cat");
  EXPECT_OP_ERROR(cat({a, Tensor::ones({2})}, 0), ShapeError, "cat");
  EXPECT_OP_ERROR(cat({a, a}, 2), IndexError, "cat");
  EXPECT_OP_ERROR(cat({a, fake_cuda({2, 2})}), DeviceError, "cat");
  EXPECT_OP_ERROR(stack({a, Tensor::ones({2, 3})}), ShapeError, "stack");
  EXPECT_OP_ERROR(stack({a, a.to(kInt32)}), DTypeError, "stack");
  EXPECT_OP_ERROR(stack({a}, 3), IndexError, "stack");
  EXPECT_OP_ERROR(index_select(a, 0, f32({0}, {1})), DTypeError, "index_select");
  EXPECT_OP_ERROR(index_select(a, 0, i64({2}, {1})), IndexError, "index_select");
  EXPECT_OP_ERROR(index_select(a, 0, i64({-1}, {1})), IndexError, "index_select");
  EXPECT_OP_ERROR(index_select(a, 0, i64({0, 1}, {1, 2})), ShapeError, "index_select");
  EXPECT_OP_ERROR(index_select(a, 0, fake_cuda({1}, kInt64)), DeviceError, "index_select");
  EXPECT_OP_ERROR(gather(a, 1, i64({0, 2}, {2, 1})), IndexError, "gather");
  EXPECT_OP_ERROR(gather(a, 1, i64({0, 1}, {2})), ShapeError, "gather");
  EXPECT_OP_ERROR(gather(a, 1, i64({0, 0, 0}, {3, 1})), ShapeError, "gather");
  EXPECT_OP_ERROR(gather(a, 1, mask({true, true}, {2, 1})), DTypeError, "gather");
  EXPECT_OP_ERROR(gather(a, 2, i64({0, 0}, {2, 1})), IndexError, "gather");
  EXPECT_OP_ERROR(scatter_add(a, 0, i64({0}, {1, 1}), i32({1}, {1, 1})), DTypeError, "scatter_add");
  EXPECT_OP_ERROR(scatter_add(a, 0, i64({5}, {1, 1}), f32({1}, {1, 1})), IndexError, "scatter_add");
  EXPECT_OP_ERROR(scatter_add(a, 0, i64({0, 0}, {1, 2}), f32({1}, {1, 1})), ShapeError,
                  "scatter_add");
  EXPECT_OP_ERROR(one_hot(i64({0, 4}, {2}), 3), IndexError, "one_hot");
  EXPECT_OP_ERROR(one_hot(i64({-1}, {1}), 3), IndexError, "one_hot");
  EXPECT_OP_ERROR(one_hot(f32({0}, {1})), DTypeError, "one_hot");
  EXPECT_OP_ERROR(one_hot(i64({}, {0})), ValueError, "one_hot");
}

}  // namespace
}  // namespace ddp
