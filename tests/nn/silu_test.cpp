// SiLU, the worked example of adding an activation (one op_list.h line and
// one functor): values against the formula in f64, the gradient against
// central differences, the module, and the bad inputs.

#include <gtest/gtest.h>

#include <cmath>

#include "ddp/autograd/gradcheck.h"
#include "ddp/nn/activation.h"
#include "ddp/nn/functional/activation.h"
#include "ddp/tensor/ops.h"
#include "tensor/op_registry.h"

namespace ddp {
namespace {

namespace F = nn::functional;

double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }
double silu_grad_ref(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

TEST(Silu, ValuesMatchTheFormula) {
  const std::vector<double> xs{-30.0, -4.0, -1.0, -0.25, 0.0, 0.5, 1.0, 3.0, 30.0};
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = Tensor::from_vector(xs, {int64_t(xs.size())}).to(dt);
    Tensor y = F::silu(x).to(DType::f64);
    const std::vector<double> got = y.to_vector<double>();
    const double tol = dt == DType::f32 ? 1e-6 : 1e-14;
    for (size_t i = 0; i < xs.size(); ++i)
      EXPECT_NEAR(got[i], silu_ref(xs[i]), tol * (1.0 + std::abs(silu_ref(xs[i])))) << xs[i];
  }
}

TEST(Silu, BackwardMatchesTheDerivative) {
  const std::vector<double> xs{-5.0, -1.0, 0.0, 0.7, 4.0};
  Tensor x = Tensor::from_vector(xs, {int64_t(xs.size())});
  x.set_requires_grad();
  sum(F::silu(x)).backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(g[i], silu_grad_ref(xs[i]), 1e-14) << xs[i];
}

TEST(Silu, Gradcheck) {
  Generator gen(7);
  Tensor x = randn({3, 5}, DType::f64, &gen).detach();
  x.set_requires_grad();
  auto r = autograd::gradcheck([](const Tensors& t) { return Tensors{F::silu(t[0])}; }, {x});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Silu, ModuleAndOpAgree) {
  nn::SiLU m;
  Generator gen(3);
  Tensor x = randn({2, 4}, DType::f32, &gen);
  EXPECT_TRUE(allclose(m.forward(x), silu(x), 0, 0));
  EXPECT_NE(m.describe().find("SiLU"), std::string::npos);
}

TEST(Silu, BadInputs) {
  nn::SiLU m;
  EXPECT_THROW(m.forward(Tensor::from_vector(std::vector<int64_t>{1, 2}, {2})), DTypeError);
  EXPECT_THROW(m.forward(Tensor()), DTypeError);
  EXPECT_THROW(F::silu(Tensor::from_vector(std::vector<int64_t>{1, 2}, {2})), DTypeError);
}

TEST(Silu, IsInTheOpRegistry) {
  EXPECT_EQ(find_op("silu").name, "silu");
  EXPECT_EQ(find_op("gelu_erf").name, "gelu_erf");
}

}  // namespace
}  // namespace ddp
