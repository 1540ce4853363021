// F::linear_gelu and nn::Linear::forward_gelu on the CPU, where the op is
// the composition gelu(linear(x, w, b), "tanh") (Note [linear_gelu]): values
// and gradients equal to the composition, gradcheck in f64, autocast as
// linear, and bad inputs. The fused CUDA path is compared with this one in
// linear_gpu_test.cpp and the op-consistency suite.

#include <gtest/gtest.h>

#include "ddp/amp/autocast.h"
#include "ddp/autograd/gradcheck.h"
#include "ddp/nn/functional/activation.h"
#include "ddp/nn/functional/linear.h"
#include "ddp/nn/linear.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

Tensor leaf(const Shape& shape, uint64_t seed, DType dt = DType::f64) {
  Generator gen(seed);
  return randn(shape, DType::f64, &gen).to(dt).detach().set_requires_grad();
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         a.to(DType::f64).to_vector<double>() == b.to(DType::f64).to_vector<double>();
}

// Forward and every gradient of linear_gelu equal those of the composition
// exactly (the CPU runs the same ops).
TEST(LinearGelu, EqualsComposedOnCpu) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (with_bias ? " bias" : " no bias"));
      Tensor x = leaf({2, 3, 4}, 1, dt), w = leaf({8, 4}, 2, dt);
      Tensor b = with_bias ? leaf({8}, 3, dt) : Tensor();
      Tensor x2 = x.detach().clone().set_requires_grad();
      Tensor w2 = w.detach().clone().set_requires_grad();
      Tensor b2 = with_bias ? b.detach().clone().set_requires_grad() : Tensor();
      Tensor got = F::linear_gelu(x, w, b);
      Tensor want = F::gelu(F::linear(x2, w2, b2), "tanh");
      ASSERT_EQ(got.shape(), (Shape{2, 3, 8}));
      EXPECT_TRUE(same(got, want));
      Tensor dy = leaf({2, 3, 8}, 4, dt).detach();
      got.backward(dy);
      want.backward(dy);
      EXPECT_TRUE(same(x.grad(), x2.grad()));
      EXPECT_TRUE(same(w.grad(), w2.grad()));
      if (with_bias) EXPECT_TRUE(same(b.grad(), b2.grad()));
    }
  }
}

// Known values: gelu_tanh(1·2 + 0.5) at one point, by the formula.
TEST(LinearGelu, KnownValue) {
  Tensor x = Tensor::from_vector(std::vector<double>{1.0}, {1, 1});
  Tensor w = Tensor::from_vector(std::vector<double>{2.0}, {1, 1});
  Tensor b = Tensor::from_vector(std::vector<double>{0.5}, {1});
  const double h = 2.5;
  const double want =
      0.5 * h * (1 + std::tanh(std::sqrt(2 / M_PI) * (h + 0.044715 * h * h * h)));
  EXPECT_NEAR(F::linear_gelu(x, w, b).item<double>(), want, 1e-15);
}

TEST(LinearGelu, Gradcheck) {
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    Tensors in{leaf({3, 2, 5}, 5), leaf({8, 5}, 6)};
    if (with_bias) in.push_back(leaf({8}, 7));
    auto r = autograd::gradcheck(
        [&](const Tensors& t) {
          return Tensors{F::linear_gelu(t[0], t[1], with_bias ? t[2] : Tensor())};
        },
        in);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// Autocast casts linear_gelu's inputs like linear's (lower precision).
TEST(LinearGelu, AutocastTreatsItAsLinear) {
  Tensor x = leaf({3, 4}, 8, DType::f32), w = leaf({8, 4}, 9, DType::f32);
  Tensor b = leaf({8}, 10, DType::f32);
  for (DType low : {DType::bf16, DType::f16}) {
    Tensor got;
    {
      amp::Autocast on(DeviceType::CPU, low);
      got = F::linear_gelu(x, w, b);
    }
    EXPECT_EQ(got.dtype(), low);
    EXPECT_TRUE(same(got, F::linear_gelu(x.to(low), w.to(low), b.to(low))));
  }
}

TEST(LinearGelu, BadInputsRaiseClearErrors) {
  Tensor x = Tensor::zeros({2, 4}), w = Tensor::zeros({3, 4});
  EXPECT_DDP_ERROR(F::linear_gelu(x, Tensor::zeros({3, 5})), ShapeError,
                   "linear_gelu: expected an input [..., 5]");
  EXPECT_DDP_ERROR(F::linear_gelu(x, Tensor::zeros({4})), ShapeError,
                   "linear_gelu: weight must be [out, in]");
  EXPECT_DDP_ERROR(F::linear_gelu(x, w, Tensor::zeros({4})), ShapeError,
                   "linear_gelu: bias must be [3]");
  EXPECT_DDP_ERROR(F::linear_gelu(x, Tensor()), ValueError, "linear_gelu");
  EXPECT_DDP_ERROR(F::linear_gelu(x, w.to(DType::f64)), DTypeError, "linear_gelu");
  EXPECT_DDP_ERROR(F::linear_gelu(x.to(DType::i64), w.to(DType::i64)), DTypeError, "linear_gelu");
}

TEST(LinearGelu, ModuleForwardGelu) {
  nn::Linear lin(4, 8);
  Tensor x = leaf({5, 4}, 11, DType::f32);
  EXPECT_TRUE(same(lin.forward_gelu(x), F::gelu(lin.forward(x), "tanh")));
  EXPECT_DDP_ERROR(lin.forward_gelu(Tensor::zeros({5, 3})), ShapeError, "Linear");
}

// The CPU has no plan cache: its statistics stay zero.
TEST(LinearGelu, CpuHasNoPlanCache) {
  F::linear(Tensor::ones({2, 3}), Tensor::ones({4, 3}));
  const F::LinearCacheStats s = F::linear_cache_stats(DeviceType::CPU);
  EXPECT_EQ(s.entries + s.hits + s.misses, 0);
}

}  // namespace
}  // namespace ddp::test
