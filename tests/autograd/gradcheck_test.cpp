// gradcheck passes on correct backward formulas and fails on a wrong one.

#include <random>
#include <vector>

#include "autograd/test_util.h"

namespace ddp {
namespace {

using autograd::gradcheck;

Tensor random_f64(const Shape& shape, uint64_t seed, bool requires_grad = true) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) x = dist(rng);
  return test::f64(v, shape, requires_grad);
}

TEST(Gradcheck, MulAddExp) {
  Tensor x = random_f64({2, 3}, 1), y = random_f64({2, 3}, 2);
  auto r = gradcheck([](const Tensors& in) { return Tensors{in[0] * in[1] + exp(in[0])}; }, {x, y});
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_FALSE(x.grad().defined());  // gradcheck leaves .grad alone
}

TEST(Gradcheck, Matmul) {
  Tensor a = random_f64({3, 4}, 3), b = random_f64({4, 2}, 4);
  auto r = gradcheck([](const Tensors& in) { return Tensors{matmul(in[0], in[1])}; }, {a, b});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Gradcheck, Softmax) {
  Tensor x = random_f64({2, 5}, 5);
  auto r = gradcheck([](const Tensors& in) { return Tensors{softmax(in[0], -1)}; }, {x});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Gradcheck, SeveralOutputsAndAConstantInput) {
  Tensor x = random_f64({4}, 6), c = random_f64({4}, 7, /*requires_grad=*/false);
  auto r = gradcheck(
      [](const Tensors& in) {
        return Tensors{tanh(in[0]) * in[1], sum(in[0] * in[0])};
      },
      {x, c});
  EXPECT_TRUE(r.ok) << r.message;
}

// y = x^2 computed without history, then recorded with a backward that
// forgets the factor 2.
Tensors wrong_square(const Tensors& in) {
  const Tensor& x = in[0];
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x * x;
  }
  autograd::record("wrong_square", {x}, {y}, [xd = x.detach()](const Tensors& g) {
    return Tensors{g[0] * xd};  // should be 2 * g * x
  });
  return {y};
}

TEST(Gradcheck, FailsOnWrongBackward) {
  Tensor x = random_f64({3}, 8);
  auto r = gradcheck(wrong_square, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("input 0"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("analytical"), std::string::npos) << r.message;
}

TEST(Gradcheck, RightCustomBackwardPasses) {
  Tensor x = random_f64({3}, 9);
  auto right_square = [](const Tensors& in) {
    const Tensor& x = in[0];
    Tensor y;
    {
      NoGradGuard no_grad;
      y = x * x;
    }
    autograd::record("square", {x}, {y},
                     [xd = x.detach()](const Tensors& g) { return Tensors{g[0] * xd * 2.0}; });
    return Tensors{y};
  };
  auto r = gradcheck(right_square, {x});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Gradcheck, RejectsNonF64Inputs) {
  Tensor x = Tensor::zeros({2}, TensorOptions(kFloat32).requires_grad());
  EXPECT_THROW(gradcheck([](const Tensors& in) { return in; }, {x}), DTypeError);
}

}  // namespace
}  // namespace ddp
