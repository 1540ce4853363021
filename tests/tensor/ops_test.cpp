// Hand-computed values for the elementwise, reduction and creation ops of
// ops.h and for the whole-tensor comparisons, and one test per error path:
// each raises its specific ddp::Error subclass with a message that names the
// op. Linear algebra, softmax and indexing: ops_linalg_index_test.cpp.

#include <cmath>
#include <string>
#include <vector>

#include "tensor/ops_test_util.h"

namespace ddp {
namespace {

using namespace test_ops;

// ---- elementwise --------------------------------------------------------------------

TEST(OpsElementwise, UnaryValues) {
  std::vector<double> xs = {-1.5, -0.5, 0.5, 2.0};
  Tensor x = f64(xs, {4});
  auto check = [&](const Tensor& y, double (*f)(double)) {
    std::vector<double> e;
    for (double v : xs) e.push_back(f(v));
    expect_values(y, e, 1e-12);
  };
  check(relu(x), [](double v) { return v > 0 ? v : 0.0; });
  check(neg(x), [](double v) { return -v; });
  check(abs(x), [](double v) { return std::fabs(v); });
  check(exp(x), [](double v) { return std::exp(v); });
  check(tanh(x), [](double v) { return std::tanh(v); });
  check(sigmoid(x), [](double v) { return 1 / (1 + std::exp(-v)); });
  check(gelu(x), [](double v) {
    return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  });
  Tensor p = f64({0.25, 1, 4}, {3});
  expect_values(log(p), {std::log(0.25), 0, std::log(4.0)}, 1e-12);
  expect_values(sqrt(p), {0.5, 1, 2}, 1e-12);
  expect_values(rsqrt(p), {2, 1, 0.5}, 1e-12);
  EXPECT_EQ(unary(UnaryOp::exp, x).dtype(), kFloat64);
}

TEST(OpsElementwise, UnaryDTypes) {
  Tensor n = i32({-2, 0, 3}, {3});
  EXPECT_EQ(relu(n).dtype(), kInt32);  // not float_only: keeps the dtype
  expect_values(relu(n), {0, 0, 3});
  expect_values(abs(n), {2, 0, 3});
  Tensor e = exp(n);  // float_only: integers compute in f32
  EXPECT_EQ(e.dtype(), kFloat32);
  expect_values(e, {std::exp(-2.0), 1, std::exp(3.0)}, 1e-4);
  EXPECT_EQ(sqrt(mask({true, false}, {2})).dtype(), kFloat32);
  Tensor h = relu(f32({-1, 2}, {2}).to(kFloat16));
  EXPECT_EQ(h.dtype(), kFloat16);
  expect_values(h, {0, 2});
}

TEST(OpsElementwise, UnaryOnStridedInput) {
  Tensor x = f32({1, -2, 3, -4, 5, -6}, {2, 3}).t();  // [3, 2], transposed
  expect_values(relu(x), {1, 0, 0, 5, 3, 0});
}

TEST(OpsElementwise, BroadcastAdd) {
  // [2, 1, 3] + [4, 3] -> [2, 4, 3]
  Tensor a = f32({0, 1, 2, 10, 11, 12}, {2, 1, 3});
  std::vector<float> bv(12);
  for (int i = 0; i < 12; ++i) bv[size_t(i)] = float(100 * (i / 3));
  Tensor b = f32(bv, {4, 3});
  Tensor c = add(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 4, 3}));
  std::vector<double> e;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) e.push_back(10 * i + k + 100 * j);
  expect_values(c, e);
  expect_values(a + b, e);
}

TEST(OpsElementwise, TypePromotion) {
  Tensor a = i32({1, 2}, {2});
  Tensor b = f32({0.5, 0.25}, {2});
  Tensor c = add(a, b);
  EXPECT_EQ(c.dtype(), kFloat32);
  expect_values(c, {1.5, 2.25});
  EXPECT_EQ(add(a, i64({1, 1}, {2})).dtype(), kInt64);
  EXPECT_EQ(mul(b, f64({1, 1}, {2})).dtype(), kFloat64);
  EXPECT_EQ(sub(b.to(kFloat16), b.to(kBFloat16)).dtype(), kFloat32);
  EXPECT_EQ(add(mask({true, false}, {2}), a).dtype(), kInt32);
}

TEST(OpsElementwise, ScalarOperands) {
  Tensor n = i32({1, 2, 3}, {3});
  Tensor whole = add(n, 2.0);  // a whole number keeps the integer dtype
  EXPECT_EQ(whole.dtype(), kInt32);
  expect_values(whole, {3, 4, 5});
  Tensor frac = mul(n, 0.5);  // a fraction promotes integers to f32
  EXPECT_EQ(frac.dtype(), kFloat32);
  expect_values(frac, {0.5, 1, 1.5});
  Tensor h = mul(f32({1, 2}, {2}).to(kFloat16), 3.0);  // floats keep their dtype
  EXPECT_EQ(h.dtype(), kFloat16);
  expect_values(h, {3, 6});
  Tensor b = add(mask({true, false}, {2}), 1.0);  // bool + whole number -> i64
  EXPECT_EQ(b.dtype(), kInt64);
  expect_values(b, {2, 1});
  Tensor x = f32({1, 2}, {2});
  expect_values(x * 2.0, {2, 4});
  expect_values(2.0 * x, {2, 4});
  expect_values(x - 1.0, {0, 1});
  expect_values(1.0 + x, {2, 3});
  expect_values(x / 4.0, {0.25, 0.5});
  expect_values(-x, {-1, -2});
}

TEST(OpsElementwise, DivIsTrueDivision) {
  Tensor q = div(i32({7, -7, 1}, {3}), i32({2, 2, 4}, {3}));
  EXPECT_EQ(q.dtype(), kFloat32);
  expect_values(q, {3.5, -3.5, 0.25});
}

TEST(OpsElementwise, MaximumMinimum) {
  Tensor a = f32({1, 5, -2}, {3}), b = f32({3, 4, -2}, {3});
  expect_values(maximum(a, b), {3, 5, -2});
  expect_values(minimum(a, b), {1, 4, -2});
  expect_values(maximum(a, 0.0), {1, 5, 0});
  expect_values(binary(BinaryOp::minimum, a, b), {1, 4, -2});
}

TEST(OpsElementwise, Comparisons) {
  Tensor a = f32({1, 2, 3}, {3}), b = f32({3, 2, 1}, {3});
  Tensor r = lt(a, b);
  EXPECT_EQ(r.dtype(), kBool);
  expect_values(r, {1, 0, 0});
  expect_values(le(a, b), {1, 1, 0});
  expect_values(gt(a, b), {0, 0, 1});
  expect_values(ge(a, b), {0, 1, 1});
  expect_values(eq(a, b), {0, 1, 0});
  expect_values(ne(a, b), {1, 0, 1});
  expect_values(eq(i32({1, 2}, {2}), 2.0), {0, 1});
  expect_values(gt(i32({1, 2}, {2}), 1.5), {0, 1});  // compared in f32
  Tensor bc = lt(f32({1, 2}, {2, 1}), f32({0, 1.5, 3}, {3}));  // broadcast [2, 3]
  EXPECT_EQ(bc.shape(), (Shape{2, 3}));
  expect_values(bc, {0, 1, 1, 0, 0, 1});
}

TEST(OpsElementwise, WhereAndMaskedFill) {
  Tensor c = mask({true, false, true}, {3});
  Tensor a = f32({1, 2, 3}, {3}), b = f32({10, 20}, {2, 1});
  Tensor w = where(c, a, b);  // broadcast to [2, 3]
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  expect_values(w, {1, 10, 3, 1, 20, 3});
  expect_values(where(c, -1.0, a), {-1, 2, -1});
  Tensor m = masked_fill(f32({1, 2, 3, 4}, {2, 2}), mask({false, true}, {2}), 9.0);
  expect_values(m, {1, 9, 3, 9});
  EXPECT_EQ(masked_fill(i32({1, 2}, {2}), mask({true, false}, {2}), 7.0).dtype(), kInt32);
}

TEST(OpsElementwise, WhereAndMaskedFillGradients) {
  Tensor c = mask({true, false, true}, {3});
  Tensor a = f64({1, 2, 3}, {3}, true), b = f64({5}, {1}, true);
  sum(where(c, a, b)).backward();
  expect_values(a.grad(), {1, 0, 1});
  expect_values(b.grad(), {1});
  Tensor x = f64({1, 2, 3}, {3}, true);
  sum(mul(masked_fill(x, c, 0.0), 2.0)).backward();
  expect_values(x.grad(), {0, 2, 0});
}

TEST(OpsElementwise, Pow) {
  Tensor x = f64({-2, 0.5, 3}, {3});
  expect_values(pow(x, 2.0), {4, 0.25, 9}, 1e-12);
  expect_values(pow(x, 3.0), {-8, 0.125, 27}, 1e-12);  // keeps the sign
  expect_values(pow(x, -1.0), {-0.5, 2, 1.0 / 3}, 1e-12);
  expect_values(pow(x, 0.0), {1, 1, 1});
  expect_values(pow(x, 1.0), {-2, 0.5, 3});
  Tensor p = f64({0.25, 4}, {2});
  expect_values(pow(p, 0.5), {0.5, 2}, 1e-12);
  expect_values(pow(p, 2.5), {std::pow(0.25, 2.5), 32}, 1e-10);
  expect_values(pow(p, -0.5), {2, 0.5}, 1e-12);
  Tensor n = pow(i32({2, 3}, {2}), 3.0);
  EXPECT_EQ(n.dtype(), kInt32);
  expect_values(n, {8, 27});
  Tensor g = f64({2, 3}, {2}, true);
  sum(pow(g, 3.0)).backward();
  expect_values(g.grad(), {12, 27}, 1e-12);
}

TEST(OpsElementwise, BinaryGradientsUnbroadcast) {
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 1, 3}, true);
  Tensor b = f64({1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4}, {4, 3}, true);
  sum(mul(a, b)).backward();
  EXPECT_EQ(a.grad().shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(b.grad().shape(), (Shape{4, 3}));
  expect_values(a.grad(), {10, 10, 10, 10, 10, 10});  // sum over b's rows
  expect_values(b.grad(), {5, 7, 9, 5, 7, 9, 5, 7, 9, 5, 7, 9});
  Tensor x = f64({6}, {1}, true), y = f64({2, 3}, {2}, true);
  sum(div(x, y)).backward();
  expect_values(x.grad(), {0.5 + 1.0 / 3});
  expect_values(y.grad(), {-6.0 / 4, -6.0 / 9});
}

TEST(OpsElementwise, MaximumGradientSplitsTies) {
  Tensor a = f64({1, 5, 2}, {3}, true), b = f64({3, 4, 2}, {3}, true);
  sum(maximum(a, b)).backward();
  expect_values(a.grad(), {0, 1, 0.5});
  expect_values(b.grad(), {1, 0, 0.5});
}

TEST(OpsElementwise, GradientKeepsInputDType) {
  Tensor a = Tensor::from_vector<float>({1, 2}, {2}, TensorOptions(kFloat32).requires_grad());
  Tensor b = f64({3, 4}, {2});
  Tensor c = mul(a, b);
  EXPECT_EQ(c.dtype(), kFloat64);
  sum(c).backward();
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  expect_values(a.grad(), {3, 4});
}

TEST(OpsElementwise, Errors) {
  Tensor a = f32({1, 2, 3}, {3}), b = f32({1, 2}, {2});
  EXPECT_OP_ERROR(add(a, b), ShapeError, "add");
  EXPECT_OP_ERROR(add(a, b), ShapeError, "f32[3] on cpu");
  EXPECT_OP_ERROR(lt(a, b), ShapeError, "lt");
  Tensor m = mask({true, false}, {2});
  EXPECT_OP_ERROR(add(m, m), DTypeError, "add");
  EXPECT_OP_ERROR(maximum(m, m), DTypeError, "maximum");
  EXPECT_OP_ERROR(neg(m), DTypeError, "neg");
  EXPECT_OP_ERROR(pow(m, 2.0), DTypeError, "pow");
  EXPECT_OP_ERROR(pow(i32({2}, {1}), -1.0), ValueError, "pow");
  EXPECT_OP_ERROR(mul(a, fake_cuda({3})), DeviceError, "mul");
  EXPECT_OP_ERROR(mul(a, fake_cuda({3})), DeviceError, "cuda:0");
  EXPECT_OP_ERROR(eq(a, fake_cuda({3})), DeviceError, "eq");
  EXPECT_OP_ERROR(add(a, Tensor()), ValueError, "add");
  EXPECT_OP_ERROR(exp(Tensor()), ValueError, "exp");
  EXPECT_OP_ERROR(where(a, a, a), DTypeError, "where");
  EXPECT_OP_ERROR(where(m, a, a), ShapeError, "where");
  EXPECT_OP_ERROR(where(m.to(Device::cpu()), b, fake_cuda({2})), DeviceError, "where");
  EXPECT_OP_ERROR(masked_fill(a, a, 1.0), DTypeError, "masked_fill");
  EXPECT_OP_ERROR(masked_fill(b, mask({true, false}, {2, 1}), 1.0), ShapeError, "masked_fill");
  EXPECT_OP_ERROR(masked_fill(a, fake_cuda({3}, kBool), 1.0), DeviceError, "masked_fill");
}

TEST(OpsElementwise, OpNames) {
  EXPECT_STREQ(op_name(UnaryOp::gelu), "gelu");
  EXPECT_STREQ(op_name(BinaryOp::maximum), "maximum");
  EXPECT_STREQ(op_name(CompareOp::ge), "ge");
  EXPECT_STREQ(op_name(ReductionOp::argmin), "argmin");
}

// ---- reductions ---------------------------------------------------------------------

TEST(OpsReduce, Sum) {
  Tensor x = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor all = sum(x);
  EXPECT_EQ(all.dim(), 0);
  expect_values(all, {21});
  expect_values(sum(x, {0}), {5, 7, 9});
  expect_values(sum(x, {-1}), {6, 15});
  EXPECT_EQ(sum(x, {1}, true).shape(), (Shape{2, 1}));
  expect_values(sum(x, {0, 1}), {21});
  expect_values(sum(x.t(), {1}), {5, 7, 9});  // strided input
  expect_values(sum(Tensor::zeros({3, 0})), {0});
  expect_values(sum(Tensor::zeros({3, 0}), {1}), {0, 0, 0});
  expect_values(sum(Tensor::scalar(4.0)), {4});
}

TEST(OpsReduce, IntegerSumIsInt64) {
  Tensor s = sum(i32({1, 2, 3}, {3}));
  EXPECT_EQ(s.dtype(), kInt64);
  EXPECT_EQ(s.item<int64_t>(), 6);
  Tensor count = sum(mask({true, false, true, true}, {4}));
  EXPECT_EQ(count.dtype(), kInt64);
  EXPECT_EQ(count.item<int64_t>(), 3);
  EXPECT_EQ(sum(f32({1}, {1}).to(kFloat16)).dtype(), kFloat16);
}

TEST(OpsReduce, MeanAndVar) {
  Tensor x = f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  expect_values(mean(x), {4.5});
  expect_values(mean(x, {1}), {2.5, 6.5});
  EXPECT_EQ(mean(x, {0}, true).shape(), (Shape{1, 4}));
  // Unbiased by default: var([1, 2, 3, 4]) = 5/3.
  expect_values(var(x, {1}), {5.0 / 3, 5.0 / 3}, 1e-12);
  expect_values(var(x, {1}, 0), {1.25, 1.25}, 1e-12);
  expect_values(var(x), {6.0}, 1e-12);  // 42 / 7
  EXPECT_EQ(var(x, {0}, 1, true).shape(), (Shape{1, 4}));
  EXPECT_TRUE(std::isnan(var(f64({3}, {1})).item<double>()));  // N - 1 = 0
  // Half precision accumulates in f32: a sum of 100000 ones overflows f16.
  Tensor ones = Tensor::ones({100000}, kFloat16);
  Tensor m = mean(ones);
  EXPECT_EQ(m.dtype(), kFloat16);
  expect_values(m, {1});
  expect_values(var(ones), {0});
  expect_values(mean(Tensor::ones({100000}, kBFloat16)), {1});
}

TEST(OpsReduce, MeanVarGradients) {
  Tensor x = f64({1, 2, 3, 6}, {4}, true);
  mean(x).backward();
  expect_values(x.grad(), {0.25, 0.25, 0.25, 0.25});
  Tensor y = f64({1, 2, 3, 6}, {4}, true);
  var(y).backward();  // d/dy var = 2 (y - mean) / (N - 1), mean 3
  expect_values(y.grad(), {-4.0 / 3, -2.0 / 3, 0, 2}, 1e-12);
}

TEST(OpsReduce, MaxMin) {
  Tensor x = f32({3, 1, 4, 1, 5, 9, 2, 6}, {2, 4});
  expect_values(max(x), {9});
  expect_values(min(x), {1});
  ValuesIndices m = max(x, 1);
  expect_values(m.values, {4, 9});
  EXPECT_EQ(m.indices.dtype(), kInt64);
  expect_values(m.indices, {2, 1});
  ValuesIndices n = min(x, 0, true);
  EXPECT_EQ(n.values.shape(), (Shape{1, 4}));
  expect_values(n.values, {3, 1, 2, 1});
  expect_values(n.indices, {0, 0, 1, 0});
  // Ties: the first index, like torch.
  expect_values(argmin(x, 1), {1, 2});
  expect_values(argmax(f32({2, 7, 7}, {3}), 0), {1});
  EXPECT_EQ(argmax(x, 1, true).shape(), (Shape{2, 1}));
  expect_values(max(i32({-3, 8, 2}, {3})), {8});
}

TEST(OpsReduce, MaxMinGradients) {
  Tensor x = f64({3, 1, 4, 1, 5, 9}, {2, 3}, true);
  sum(max(x, 1).values).backward();
  expect_values(x.grad(), {0, 0, 1, 0, 0, 1});
  Tensor y = f64({2, 7, 7}, {3}, true);
  max(y).backward();  // ties share the gradient
  expect_values(y.grad(), {0, 0.5, 0.5});
  Tensor z = f64({2, 7, 1}, {3}, true);
  sum(mul(min(z, 0, true).values, 3.0)).backward();
  expect_values(z.grad(), {0, 0, 3});
}

TEST(OpsReduce, SumTo) {
  Tensor x = f32({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3});
  Tensor s = sum_to(x, {2, 1});
  EXPECT_EQ(s.shape(), (Shape{2, 1}));
  expect_values(s, {1 + 2 + 3 + 7 + 8 + 9, 4 + 5 + 6 + 10 + 11 + 12});
  expect_values(sum_to(x, {3}), {22, 26, 30});
  EXPECT_TRUE(sum_to(x, {2, 2, 3}).is_same(x));
  expect_values(sum_to(x, {}), {78});
}

TEST(OpsReduce, Errors) {
  Tensor x = f32({1, 2, 3, 4}, {2, 2});
  EXPECT_OP_ERROR(sum(x, {2}), IndexError, "sum");
  EXPECT_OP_ERROR(sum(x, {0, -2}), ValueError, "sum");
  EXPECT_OP_ERROR(mean(i32({1, 2}, {2})), DTypeError, "mean");
  EXPECT_OP_ERROR(var(i32({1, 2}, {2})), DTypeError, "var");
  EXPECT_OP_ERROR(max(Tensor::zeros({0})), IndexError, "max");
  EXPECT_OP_ERROR(min(Tensor::zeros({2, 0}), 1), IndexError, "min");
  EXPECT_OP_ERROR(argmax(x, 5), IndexError, "argmax");
  EXPECT_OP_ERROR(argmin(Tensor::zeros({0, 3}), 0), IndexError, "argmin");
  EXPECT_OP_ERROR(sum_to(x, {3}), ShapeError, "sum_to");
  EXPECT_OP_ERROR(sum_to(x, {1, 2, 2}), ShapeError, "sum_to");
  EXPECT_OP_ERROR(sum(Tensor()), ValueError, "sum");
}

// ---- creation ----------------------------------------------------------------------------

TEST(OpsCreation, Like) {
  Tensor x = i32({1, 2, 3, 4}, {2, 2});
  Tensor z = zeros_like(x), o = ones_like(x), f = full_like(x, 7), e = empty_like(x);
  for (const Tensor& t : {z, o, f, e}) {
    EXPECT_EQ(t.shape(), x.shape());
    EXPECT_EQ(t.dtype(), kInt32);
  }
  expect_values(z, {0, 0, 0, 0});
  expect_values(o, {1, 1, 1, 1});
  expect_values(f, {7, 7, 7, 7});
}

TEST(OpsCreation, Arange) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), kInt64);
  expect_values(a, {0, 1, 2, 3, 4});
  expect_values(arange(1.0, 2.0, 0.25, kFloat32), {1, 1.25, 1.5, 1.75});
  expect_values(arange(10, 0, -3), {10, 7, 4, 1});
  EXPECT_EQ(arange(3, 3).numel(), 0);
  EXPECT_EQ(arange(0, 10, 3, kFloat64).dtype(), kFloat64);
  EXPECT_OP_ERROR(arange(0, 5, 0), ValueError, "arange");
  EXPECT_OP_ERROR(arange(0, 5, -1), ValueError, "arange");
  EXPECT_OP_ERROR(arange(3, kBool), DTypeError, "arange");
}

TEST(OpsCreation, RandIsSeededAndInRange) {
  Generator g1(99), g2(99);
  Tensor a = rand({1000}, {}, &g1), b = rand({1000}, {}, &g2);
  EXPECT_EQ(max_abs_error(a, b), 0.0);
  EXPECT_EQ(g1.offset(), 1000u);  // one counter per element
  Tensor c = rand({1000}, {}, &g1);
  EXPECT_GT(max_abs_error(a, c), 0.0);  // the next draw uses new counters
  EXPECT_GE(min(a).item<float>(), 0.0f);
  EXPECT_LT(max(a).item<float>(), 1.0f);
  Tensor u = uniform({1000}, -3, -1, kFloat64, &g1);
  EXPECT_GE(min(u).item<double>(), -3.0);
  EXPECT_LT(max(u).item<double>(), -1.0);
  // The default generator follows manual_seed.
  manual_seed(5);
  Tensor d1 = rand({10});
  manual_seed(5);
  Tensor d2 = rand({10});
  EXPECT_EQ(max_abs_error(d1, d2), 0.0);
  EXPECT_TRUE(rand({2}, TensorOptions().requires_grad()).requires_grad());
}

TEST(OpsCreation, RandnMomentsAndNormal) {
  Generator gen(2024);
  Tensor x = randn({100000}, kFloat64, &gen);
  EXPECT_NEAR(mean(x).item<double>(), 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(var(x).item<double>()), 1.0, 0.02);
  Tensor y = normal({100000}, 3, 0.5, kFloat32, &gen);
  EXPECT_NEAR(mean(y).item<float>(), 3.0, 0.01);
  EXPECT_NEAR(std::sqrt(var(y).item<float>()), 0.5, 0.01);
}

TEST(OpsCreation, InPlaceRandom) {
  Generator g1(8), g2(8);
  Tensor t = Tensor::zeros({4, 3});
  uniform_(t, 2, 3, &g1);
  EXPECT_GE(min(t).item<float>(), 2.0f);
  EXPECT_LT(max(t).item<float>(), 3.0f);
  Tensor ref = uniform({4, 3}, 2, 3, {}, &g2);
  EXPECT_EQ(max_abs_error(t, ref), 0.0);  // same counters as the factory
  Tensor strided = Tensor::zeros({3, 4}).t();
  normal_(strided, 0, 1, &g1);
  EXPECT_GT(max_abs_error(strided, Tensor::zeros({4, 3})), 0.0);
}

TEST(OpsCreation, Errors) {
  EXPECT_OP_ERROR(rand({2}, kInt32), DTypeError, "rand");
  EXPECT_OP_ERROR(randn({2}, kBool), DTypeError, "randn");
  EXPECT_OP_ERROR(uniform({2}, 1, 0), ValueError, "uniform");
  EXPECT_OP_ERROR(normal({2}, 0, -1), ValueError, "normal");
  Tensor n = i64({1}, {1});
  EXPECT_OP_ERROR(uniform_(n, 0, 1), DTypeError, "uniform_");
  Tensor f = Tensor::zeros({2});
  EXPECT_OP_ERROR(normal_(f, 0, -2), ValueError, "normal_");
  EXPECT_OP_ERROR(zeros_like(Tensor()), ValueError, "zeros_like");
}

// ---- whole-tensor comparisons ---------------------------------------------------------

TEST(OpsCompareTensors, AllcloseAndErrors) {
  Tensor a = f64({1, 2, 100}, {3}), b = f64({1, 2.001, 100.1}, {3});
  EXPECT_TRUE(allclose(a, a));
  EXPECT_FALSE(allclose(a, b));
  EXPECT_TRUE(allclose(a, b, 1e-2));
  EXPECT_FALSE(allclose(a, a.to(kFloat32)));  // dtypes differ
  EXPECT_FALSE(allclose(a, f64({1, 2}, {2})));  // shapes differ
  Tensor nan = f64({NAN}, {1});
  EXPECT_FALSE(allclose(nan, nan));
  Tensor inf = f64({INFINITY}, {1});
  EXPECT_TRUE(allclose(inf, inf));
  EXPECT_NEAR(max_abs_error(a, b), 0.1, 1e-9);
  EXPECT_NEAR(max_rel_error(a, b), 0.1 / 100.1, 1e-9);
  EXPECT_EQ(max_abs_error(a, a), 0.0);
  EXPECT_EQ(max_abs_error(nan, nan), 0.0);
  EXPECT_TRUE(std::isinf(max_abs_error(nan, f64({1}, {1}))));
  EXPECT_NEAR(max_abs_error(i32({1, 5}, {2}), f32({1, 2}, {2})), 3.0, 0);
  EXPECT_OP_ERROR(max_abs_error(a, f64({1}, {1})), ShapeError, "max_abs_error");
  EXPECT_OP_ERROR(max_rel_error(a, f64({1}, {1})), ShapeError, "max_rel_error");
}

}  // namespace
}  // namespace ddp

