// gradcheck (central differences in f64 on the CPU) of every dense layer
// and loss, through the module where there is one.

#include "ddp/autograd/gradcheck.h"
#include "ddp/nn/functional/activation.h"
#include "ddp/nn/functional/dropout.h"
#include "ddp/nn/functional/embedding.h"
#include "ddp/nn/functional/layer_norm.h"
#include "ddp/nn/functional/linear.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;
using autograd::gradcheck;

Tensor leaf(const Shape& shape, uint64_t seed, double scale = 1.0) {
  Generator gen(seed);
  return (randn(shape, DType::f64, &gen) * scale).detach().set_requires_grad();
}

#define EXPECT_GRADCHECK(fn, inputs) \
  do {                               \
    auto r = gradcheck(fn, inputs);  \
    EXPECT_TRUE(r.ok) << r.message;  \
  } while (0)

TEST(DenseGradcheck, Linear) {
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias" : "no bias");
    Tensor x = leaf({2, 3, 4}, 1), w = leaf({5, 4}, 2), b = bias ? leaf({5}, 3) : Tensor();
    Tensors in{x, w};
    if (bias) in.push_back(b);
    EXPECT_GRADCHECK(
        [&](const Tensors& t) { return Tensors{F::linear(t[0], t[1], bias ? t[2] : Tensor())}; },
        in);
  }
}

TEST(DenseGradcheck, LayerNorm) {
  Tensor x = leaf({3, 2, 5}, 4, 2.0), w = leaf({5}, 5), b = leaf({5}, 6);
  EXPECT_GRADCHECK([](const Tensors& t) { return Tensors{F::layer_norm(t[0], {5}, t[1], t[2])}; },
                   (Tensors{x, w, b}));
  Tensor w2 = leaf({2, 5}, 7), b2 = leaf({2, 5}, 8);
  EXPECT_GRADCHECK(
      [](const Tensors& t) {
        return Tensors{F::layer_norm(t[0], {2, 5}, t[1], t[2], 1e-3)};
      },
      (Tensors{x, w2, b2}));
  EXPECT_GRADCHECK([](const Tensors& t) { return Tensors{F::layer_norm(t[0], {5})}; },
                   (Tensors{x}));
}

TEST(DenseGradcheck, LayerNormModule) {
  auto ln = std::make_shared<nn::LayerNorm>(Shape{4});
  ln->to(DType::f64);
  nn::init::normal_(ln->weight);
  nn::init::normal_(ln->bias);
  EXPECT_GRADCHECK([&](const Tensors& t) { return Tensors{ln->forward(t[0])}; },
                   (Tensors{leaf({3, 4}, 9)}));
}

TEST(DenseGradcheck, Activations) {
  Tensor x = leaf({4, 6}, 10, 2.0);
  for (const char* approximate : {"none", "tanh"}) {
    auto gelu = std::make_shared<nn::GELU>(approximate);
    EXPECT_GRADCHECK([&](const Tensors& t) { return Tensors{gelu->forward(t[0])}; }, (Tensors{x}));
  }
  // ReLU: random inputs are never within eps of the kink at 0.
  Tensor xr = leaf({4, 6}, 11);
  auto relu = std::make_shared<nn::ReLU>();
  EXPECT_GRADCHECK([&](const Tensors& t) { return Tensors{relu->forward(t[0])}; }, (Tensors{xr}));
}

TEST(DenseGradcheck, DropoutWithAFixedMask) {
  // A fresh generator per call, so every evaluation drops the same elements.
  EXPECT_GRADCHECK(
      [](const Tensors& t) {
        Generator gen(99);
        return Tensors{F::dropout(t[0], 0.3, true, &gen)};
      },
      (Tensors{leaf({5, 7}, 12)}));
}

TEST(DenseGradcheck, FlattenAndEmbedding) {
  auto flat = std::make_shared<nn::Flatten>();
  EXPECT_GRADCHECK([&](const Tensors& t) { return Tensors{flat->forward(t[0])}; },
                   (Tensors{leaf({2, 3, 4}, 13)}));
  Tensor index = Tensor::from_vector<int64_t>({1, 4, 1, 0, 4, 4}, {2, 3});
  EXPECT_GRADCHECK([&](const Tensors& t) { return Tensors{F::embedding(index, t[0])}; },
                   (Tensors{leaf({5, 3}, 14)}));
}

TEST(DenseGradcheck, CrossEntropy) {
  Tensor target = Tensor::from_vector<int64_t>({2, 0, -100, 3, 3}, {5});
  for (auto reduction : {nn::Reduction::mean, nn::Reduction::sum, nn::Reduction::none}) {
    for (double smoothing : {0.0, 0.15}) {
      SCOPED_TRACE(smoothing);
      EXPECT_GRADCHECK(
          [&](const Tensors& t) {
            return Tensors{F::cross_entropy(t[0], target, reduction, smoothing)};
          },
          (Tensors{leaf({5, 4}, 15, 2.0)}));
    }
  }
  Tensor target3 = Tensor::from_vector<int64_t>({0, 2, 1, 1, 0, 2}, {2, 3});
  EXPECT_GRADCHECK([&](const Tensors& t) { return Tensors{F::cross_entropy(t[0], target3)}; },
                   (Tensors{leaf({2, 3, 3}, 16)}));
}

TEST(DenseGradcheck, MseLoss) {
  for (auto reduction : {nn::Reduction::mean, nn::Reduction::sum, nn::Reduction::none})
    EXPECT_GRADCHECK([&](const Tensors& t) { return Tensors{F::mse_loss(t[0], t[1], reduction)}; },
                     (Tensors{leaf({3, 4}, 17), leaf({3, 4}, 18)}));
}

}  // namespace
}  // namespace ddp::test
