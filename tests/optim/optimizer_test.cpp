// Optimizer behaviour beyond the golden numbers: groups, zero_grad,
// skipping parameters without gradients, in-place updates, bad arguments.
#include <gtest/gtest.h>

#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/linear.h"
#include "optim/optim_test_util.h"

namespace ddp::test {
namespace {

using optim::AdamW;
using optim::AdamWOptions;
using optim::ParamGroup;
using optim::SGD;
using optim::SGDOptions;

Tensor leaf(const Shape& s, double v = 1.0) { return Tensor::full(s, v).set_requires_grad(); }

TEST(Optimizer, GroupsTakeDefaultsOrTheirOwnValues) {
  Tensor a = leaf({2}), b = leaf({2});
  SGD opt({{{a}, 0.5, std::nullopt}, {{b}, std::nullopt, 0.25}}, 0.1,
          SGDOptions{.weight_decay = 0.01});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(*opt.param_groups()[0].lr, 0.5);
  EXPECT_EQ(*opt.param_groups()[0].weight_decay, 0.01);
  EXPECT_EQ(*opt.param_groups()[1].lr, 0.1);
  EXPECT_EQ(*opt.param_groups()[1].weight_decay, 0.25);
}

TEST(Optimizer, GroupLrChangesBetweenStepsTakeEffect) {
  Tensor a = leaf({2}), b = leaf({2});
  SGD opt({{{a}, 0.5, std::nullopt}, {{b}, 0.5, std::nullopt}}, 0.1);
  opt.param_groups()[1].lr = 0.0;  // e.g. a frozen group, set by a scheduler
  a.set_grad(Tensor::ones({2}));
  b.set_grad(Tensor::ones({2}));
  opt.step();
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1.0f, 1.0f}));
}

TEST(Optimizer, AdamWWeightDecayIsPerGroup) {
  // With a zero gradient Adam's update is 0, so only the decay moves p.
  Tensor a = leaf({2}), b = leaf({2});
  AdamW opt({{{a}, std::nullopt, 0.5}, {{b}, std::nullopt, 0.0}}, 0.1);
  a.set_grad(Tensor::zeros({2}));
  b.set_grad(Tensor::zeros({2}));
  opt.step();
  EXPECT_NEAR(a.to_vector<float>()[0], 0.95, 1e-7);
  EXPECT_EQ(b.to_vector<float>()[0], 1.0f);
}

// The example of docs/optim.md: no weight decay on biases.
TEST(Optimizer, NoDecayGroupAsInTheDocs) {
  auto model = std::make_shared<nn::Linear>(3, 2);
  Tensors decay, no_decay;
  for (auto& [name, p] : model->named_parameters()) (p.dim() <= 1 ? no_decay : decay).push_back(p);
  optim::AdamW opt({{decay}, {no_decay, std::nullopt, 0.0}}, /*lr=*/3e-4,
                   {.betas = {0.9, 0.95}, .weight_decay = 0.1});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_TRUE(opt.param_groups()[0].params[0].is_same(model->parameter("weight")));
  EXPECT_EQ(*opt.param_groups()[0].weight_decay, 0.1);
  EXPECT_TRUE(opt.param_groups()[1].params[0].is_same(model->parameter("bias")));
  EXPECT_EQ(*opt.param_groups()[1].weight_decay, 0.0);
}

TEST(Optimizer, SkipsParametersWithoutGradient) {
  Tensor a = leaf({2}), b = leaf({2});
  AdamW opt({a, b}, 0.1);
  a.set_grad(Tensor::ones({2}));
  opt.step();
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1.0f, 1.0f}));
  EXPECT_FALSE(opt.state(0).empty());
  EXPECT_TRUE(opt.state(1).empty());
}

// Note [Tensor version counter]: a step counts one write to each parameter it
// updates (so caches of the old values, like the oneDNN weight cache, are
// rebuilt), and none to a parameter it skips or to a gradient.
TEST(Optimizer, StepCountsAWriteToEachUpdatedParameter) {
  for (bool sgd : {true, false}) {
    Tensor a = leaf({2}), b = leaf({2});
    std::unique_ptr<optim::Optimizer> opt;
    if (sgd) opt = std::make_unique<SGD>(Tensors{a, b}, 0.1, SGDOptions{.momentum = 0.9});
    else opt = std::make_unique<AdamW>(Tensors{a, b}, 0.1);
    a.set_grad(Tensor::ones({2}));
    const uint64_t va = a.version(), vb = b.version(), vg = a.grad().version();
    opt->step();
    EXPECT_GT(a.version(), va) << opt->name();
    EXPECT_EQ(b.version(), vb) << opt->name() << ": no gradient, not stepped";
    EXPECT_EQ(a.grad().version(), vg) << opt->name() << ": the gradient is only read";
    EXPECT_NE(a.to_vector<float>()[0], 1.0f);
  }
}

TEST(Optimizer, UpdatesInPlaceAndKeepsParametersLeaves) {
  Tensor a = leaf({3});
  void* data = a.data_ptr();
  SGD opt({a}, 0.1, SGDOptions{.momentum = 0.9});
  ASSERT_TRUE(autograd::grad_enabled());  // step() turns it off itself
  a.set_grad(Tensor::ones({3}));
  opt.step();
  EXPECT_EQ(a.data_ptr(), data);
  EXPECT_TRUE(a.is_leaf());
  EXPECT_TRUE(a.requires_grad());
  EXPECT_TRUE(autograd::grad_enabled());
  EXPECT_EQ(a.to_vector<float>()[0], 0.9f);
  // The gradient is read, never written.
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{1.0f, 1.0f, 1.0f}));
}

TEST(Optimizer, StepsTheParametersOfAModelAfterBackward) {
  Tensor w = leaf({3}, 2.0);
  SGD opt({w}, 0.25);
  sum(mul(w, w)).backward();  // d/dw = 2w = 4
  opt.step();
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1.0f, 1.0f, 1.0f}));
}

TEST(Optimizer, ZeroGrad) {
  Tensor a = leaf({2}), b = leaf({2});
  SGD opt({a, b}, 0.1);
  a.set_grad(Tensor::ones({2}));
  opt.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(a.grad().defined());
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_FALSE(b.grad().defined());
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

// ---- bad arguments -----------------------------------------------------------

template <class F>
void expect_value_error(F&& make, const std::string& fragment) {
  try {
    make();
    ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Optimizer, RejectsBadParameters) {
  Tensor a = leaf({2});
  expect_value_error([] { SGD(Tensors{}, 0.1); }, "group 0 has no parameters");
  expect_value_error([] { SGD(std::vector<ParamGroup>{}, 0.1); }, "no parameter groups");
  expect_value_error(
      [&] {
        AdamW(std::vector<ParamGroup>{{{a}}, {}});
      },
      "group 1 has no parameters");
  expect_value_error([] { SGD({Tensor()}, 0.1); }, "is undefined");
  expect_value_error([] { SGD({Tensor::ones({2})}, 0.1); }, "requires grad");
  expect_value_error([&] { SGD({mul(a, 2.0)}, 0.1); }, "leaf");
  expect_value_error([] { SGD({Tensor::ones({2}, DType::i64)}, 0.1); }, "floating");
  expect_value_error([&] { SGD({a, a}, 0.1); }, "more than once");
  expect_value_error(
      [&] {
        SGD(std::vector<ParamGroup>{{{a}}, {{a}}}, 0.1);
      },
      "parameter 0 of group 1");
}

TEST(Optimizer, RejectsBadHyperparameters) {
  Tensor a = leaf({2});
  expect_value_error([&] { SGD({a}, -0.1); }, "lr must be in");
  expect_value_error([&] { SGD({{{a}, -1.0, std::nullopt}}, 0.1); }, "group 0: lr");
  expect_value_error([&] { SGD({{{a}, std::nullopt, -1.0}}, 0.1); }, "weight_decay");
  expect_value_error([&] { SGD({a}, std::nan(""), {}); }, "lr must be in");
  expect_value_error([&] { SGD({a}, 0.1, SGDOptions{.momentum = -0.5}); }, "momentum");
  expect_value_error([&] { SGD({a}, 0.1, SGDOptions{.weight_decay = -1}); }, "weight_decay");
  expect_value_error([&] { SGD({a}, 0.1, SGDOptions{.nesterov = true}); }, "nesterov");
  expect_value_error(
      [&] { SGD({a}, 0.1, SGDOptions{.momentum = 0.9, .dampening = 0.1, .nesterov = true}); },
      "dampening = 0");
  expect_value_error([&] { AdamW({a}, -1e-3); }, "lr must be in");
  expect_value_error([&] { AdamW({a}, 1e-3, AdamWOptions{.betas = {1.0, 0.999}}); }, "betas[0]");
  expect_value_error([&] { AdamW({a}, 1e-3, AdamWOptions{.betas = {0.9, -0.1}}); }, "betas[1]");
  expect_value_error([&] { AdamW({a}, 1e-3, AdamWOptions{.eps = -1}); }, "eps");
  expect_value_error([&] { AdamW({a}, 1e-3, AdamWOptions{.weight_decay = -1}); }, "weight_decay");
}

}  // namespace
}  // namespace ddp::test
