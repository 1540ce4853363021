// F::linear_gelu_linear on the CPU, where the op is the composition
// linear(linear_gelu(x, w1, b1), w2, b2) (Note [linear_gelu_linear]): values
// and all five gradients bitwise equal to the composition, gradcheck in f64,
// autocast as linear, GPT's MLP, and bad inputs. The fused CUDA backward is
// compared with this one in linear_gelu_linear_gpu_test.cpp and the
// op-consistency suite.

#include <gtest/gtest.h>

#include "ddp/amp/autocast.h"
#include "ddp/autograd/gradcheck.h"
#include "ddp/nn/functional/linear.h"
#include "ddp/nn/models/gpt.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

Tensor leaf(const Shape& shape, uint64_t seed, DType dt = DType::f64) {
  Generator gen(seed);
  return randn(shape, DType::f64, &gen).to(dt).detach().set_requires_grad();
}

Tensor copy_leaf(const Tensor& t) {
  return t.defined() ? t.detach().clone().set_requires_grad() : Tensor();
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         a.to(DType::f64).to_vector<double>() == b.to(DType::f64).to_vector<double>();
}

TEST(LinearGeluLinear, EqualsComposedOnCpu) {
  for (DType dt : {DType::f32, DType::f64}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (with_bias ? " bias" : " no bias"));
      Tensors a{leaf({2, 3, 4}, 1, dt), leaf({8, 4}, 2, dt),
                with_bias ? leaf({8}, 3, dt) : Tensor(), leaf({5, 8}, 4, dt),
                with_bias ? leaf({5}, 5, dt) : Tensor()};
      Tensors b;
      for (const Tensor& t : a) b.push_back(copy_leaf(t));
      Tensor got = F::linear_gelu_linear(a[0], a[1], a[2], a[3], a[4]);
      Tensor want = F::linear(F::linear_gelu(b[0], b[1], b[2]), b[3], b[4]);
      ASSERT_EQ(got.shape(), (Shape{2, 3, 5}));
      EXPECT_TRUE(same(got, want));
      Tensor dz = leaf({2, 3, 5}, 6, dt).detach();
      got.backward(dz);
      want.backward(dz);
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].defined()) continue;
        SCOPED_TRACE("gradient " + std::to_string(i));
        ASSERT_TRUE(a[i].grad().defined());
        EXPECT_TRUE(same(a[i].grad(), b[i].grad()));
      }
    }
  }
}

TEST(LinearGeluLinear, Gradcheck) {
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    Tensors in{leaf({3, 2, 5}, 7), leaf({8, 5}, 8), leaf({4, 8}, 9)};
    if (with_bias) {
      in.push_back(leaf({8}, 10));
      in.push_back(leaf({4}, 11));
    }
    auto r = autograd::gradcheck(
        [&](const Tensors& t) {
          return Tensors{with_bias ? F::linear_gelu_linear(t[0], t[1], t[3], t[2], t[4])
                                   : F::linear_gelu_linear(t[0], t[1], {}, t[2])};
        },
        in);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(LinearGeluLinear, AutocastTreatsItAsLinear) {
  Tensor x = leaf({3, 4}, 12, DType::f32), w1 = leaf({8, 4}, 13, DType::f32);
  Tensor b1 = leaf({8}, 14, DType::f32), w2 = leaf({2, 8}, 15, DType::f32);
  for (DType low : {DType::bf16, DType::f16}) {
    Tensor got;
    {
      amp::Autocast on(DeviceType::CPU, low);
      got = F::linear_gelu_linear(x, w1, b1, w2);
    }
    EXPECT_EQ(got.dtype(), low);
    EXPECT_TRUE(same(got, F::linear_gelu_linear(x.to(low), w1.to(low), b1.to(low), w2.to(low))));
  }
}

TEST(LinearGeluLinear, BadInputsRaiseClearErrors) {
  Tensor x = Tensor::zeros({2, 4}), w1 = Tensor::zeros({3, 4}), w2 = Tensor::zeros({5, 3});
  EXPECT_DDP_ERROR(F::linear_gelu_linear(x, w1, {}, Tensor::zeros({5, 4})), ShapeError,
                   "linear_gelu_linear: w2 must be [out, 3]");
  EXPECT_DDP_ERROR(F::linear_gelu_linear(x, w1, {}, Tensor::zeros({3})), ShapeError,
                   "linear_gelu_linear: w2 must be [out, 3]");
  EXPECT_DDP_ERROR(F::linear_gelu_linear(x, w1, {}, w2, Tensor::zeros({3})), ShapeError,
                   "linear_gelu_linear: b2 must be [5]");
  EXPECT_DDP_ERROR(F::linear_gelu_linear(x, w1, Tensor::zeros({4}), w2), ShapeError,
                   "linear_gelu_linear: bias must be [3]");
  EXPECT_DDP_ERROR(F::linear_gelu_linear(x, Tensor::zeros({3, 5}), {}, w2), ShapeError,
                   "linear_gelu_linear: expected an input [..., 5]");
  EXPECT_DDP_ERROR(F::linear_gelu_linear(x, w1, {}, Tensor()), ValueError,
                   "linear_gelu_linear: w2 is undefined");
  EXPECT_DDP_ERROR(F::linear_gelu_linear(x, w1, {}, w2.to(DType::f64)), DTypeError,
                   "linear_gelu_linear");
  EXPECT_DDP_ERROR(F::linear_gelu_linear(x, w1, {}, w2, Tensor::zeros({5}, DType::f64)),
                   DTypeError, "linear_gelu_linear");
}

// GPT's MLP is c_proj(gelu(c_fc(x))) then dropout (p = 0 here): the fused
// op gives exactly the layer-by-layer composition on the CPU.
TEST(LinearGeluLinear, GptMlpUsesIt) {
  nn::models::GPTMLP mlp(8, 0.0, true);
  Tensor x = leaf({2, 3, 8}, 16, DType::f32).detach();
  Tensor got = mlp.forward(x);
  Tensor want = mlp.c_proj->forward(mlp.c_fc->forward_gelu(x));
  EXPECT_TRUE(same(got, want));
}

}  // namespace
}  // namespace ddp::test
