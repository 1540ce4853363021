// Tests of nn::Module (ddp/nn/module.h): registration and PyTorch-style
// names, ordering, paths, lookup, traversal with shared tensors and modules,
// train/eval, to(dtype)/to(device) with parameter identity, zero_grad,
// printing.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ddp/tensor/cuda.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// torchvision's BasicBlock, reduced to linears: conv1, bn1, conv2.
class Block : public nn::UnaryModule {
 public:
  explicit Block(int64_t c) : UnaryModule("BasicBlock") {
    conv1 = register_module("conv1", std::make_shared<TestLinear>(c, c, false));
    bn1 = register_module("bn1", std::make_shared<TestBatchNorm1d>(c));
    conv2 = register_module("conv2", std::make_shared<TestLinear>(c, c, false));
  }
  Tensor forward(const Tensor& x) override {
    return conv2->forward(relu(bn1->forward(conv1->forward(x)))) + x;
  }

  std::shared_ptr<TestLinear> conv1, conv2;
  std::shared_ptr<TestBatchNorm1d> bn1;
};

// A ResNet in miniature: conv1, bn1, layer1 (two blocks), fc.
class Net : public nn::UnaryModule {
 public:
  Net() : UnaryModule("Net") {
    conv1 = register_module("conv1", std::make_shared<TestLinear>(4, 4, false));
    bn1 = register_module("bn1", std::make_shared<TestBatchNorm1d>(4));
    auto blocks = std::make_shared<nn::Sequential>();
    blocks->push_back(std::make_shared<Block>(4));
    blocks->push_back(std::make_shared<Block>(4));
    layer1 = register_module("layer1", blocks);
    fc = register_module("fc", std::make_shared<TestLinear>(4, 2));
  }
  Tensor forward(const Tensor& x) override {
    return fc->forward(layer1->forward(relu(bn1->forward(conv1->forward(x)))));
  }

  std::shared_ptr<TestLinear> conv1, fc;
  std::shared_ptr<TestBatchNorm1d> bn1;
  std::shared_ptr<nn::Sequential> layer1;
};

// An empty module to register things into.
class Bag : public nn::Module {
 public:
  Bag() : Module("Bag") {}
};

const std::vector<std::string> kNetParameters = {"conv1.weight",
                                                 "bn1.weight",
                                                 "bn1.bias",
                                                 "layer1.0.conv1.weight",
                                                 "layer1.0.bn1.weight",
                                                 "layer1.0.bn1.bias",
                                                 "layer1.0.conv2.weight",
                                                 "layer1.1.conv1.weight",
                                                 "layer1.1.bn1.weight",
                                                 "layer1.1.bn1.bias",
                                                 "layer1.1.conv2.weight",
                                                 "fc.weight",
                                                 "fc.bias"};

TEST(Module, ParametersHavePyTorchNamesInRegistrationOrder) {
  Net net;
  EXPECT_THAT(net.named_parameters().keys(), ElementsAreArray(kNetParameters));
  EXPECT_EQ(net.parameters().size(), kNetParameters.size());
  EXPECT_TRUE(net.parameters()[0].is_same(net.conv1->weight));
  EXPECT_TRUE(
      net.named_parameters()["layer1.1.bn1.bias"].is_same(net.layer1->at<Block>(1)->bn1->bias));
  EXPECT_THAT(net.named_parameters(false).keys(), ElementsAre());
  EXPECT_THAT(net.fc->named_parameters().keys(), ElementsAre("weight", "bias"));
}

TEST(Module, BuffersAndStateDictInterleaveLikePyTorch) {
  Net net;
  EXPECT_THAT(net.named_buffers().keys(),
              ElementsAre("bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked",
                          "layer1.0.bn1.running_mean", "layer1.0.bn1.running_var",
                          "layer1.0.bn1.num_batches_tracked", "layer1.1.bn1.running_mean",
                          "layer1.1.bn1.running_var", "layer1.1.bn1.num_batches_tracked"));
  // state_dict: per module its parameters, then its buffers, then children.
  EXPECT_THAT(net.state_dict().keys(),
              ElementsAre("conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                          "bn1.running_var", "bn1.num_batches_tracked", "layer1.0.conv1.weight",
                          "layer1.0.bn1.weight", "layer1.0.bn1.bias", "layer1.0.bn1.running_mean",
                          "layer1.0.bn1.running_var", "layer1.0.bn1.num_batches_tracked",
                          "layer1.0.conv2.weight", "layer1.1.conv1.weight", "layer1.1.bn1.weight",
                          "layer1.1.bn1.bias", "layer1.1.bn1.running_mean",
                          "layer1.1.bn1.running_var", "layer1.1.bn1.num_batches_tracked",
                          "layer1.1.conv2.weight", "fc.weight", "fc.bias"));
}

TEST(Module, NamedModulesAndChildren) {
  Net net;
  EXPECT_THAT(net.named_modules().keys(),
              ElementsAre("", "conv1", "bn1", "layer1", "layer1.0", "layer1.0.conv1",
                          "layer1.0.bn1", "layer1.0.conv2", "layer1.1", "layer1.1.conv1",
                          "layer1.1.bn1", "layer1.1.conv2", "fc"));
  EXPECT_EQ(net.named_modules()[""], &net);
  EXPECT_THAT(net.named_children().keys(), ElementsAre("conv1", "bn1", "layer1", "fc"));
  ASSERT_EQ(net.children().size(), 4u);
  EXPECT_EQ(net.children()[2].get(), net.layer1.get());
  EXPECT_EQ(net.modules().size(), 13u);
}

TEST(Module, RegistrationValidatesNames) {
  Bag bag;
  bag.register_parameter("w", Tensor::zeros({2}));
  EXPECT_DDP_ERROR(bag.register_parameter("", Tensor::zeros({2})), ValueError, "empty name");
  EXPECT_DDP_ERROR(bag.register_buffer("a.b", Tensor::zeros({2})), ValueError,
                   "must not contain '.'");
  EXPECT_DDP_ERROR(bag.register_buffer("w", Tensor::zeros({2})), ValueError,
                   "'w' is already a parameter of this module");
  bag.register_module("m", std::make_shared<Bag>());
  EXPECT_DDP_ERROR(bag.register_parameter("m", Tensor::zeros({2})), ValueError,
                   "'m' is already a submodule");
  EXPECT_DDP_ERROR(bag.register_module("n", std::shared_ptr<Bag>()), ValueError, "'n' is null");
}

TEST(Module, RegisterParameterMakesARequiresGradLeaf) {
  Bag bag;
  Tensor w = Tensor::zeros({3});
  Tensor r = bag.register_parameter("w", w);
  EXPECT_TRUE(r.is_same(w));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_FALSE(bag.register_parameter("frozen", Tensor::zeros({3}), false).requires_grad());
  // An integer tensor may be a parameter only when it does not require grad.
  EXPECT_DDP_ERROR(bag.register_parameter("i", Tensor::zeros({3}, kInt64)), DTypeError,
                   "only floating tensors can require grad");
  bag.register_parameter("steps", Tensor::zeros({1}, kInt64), false);
  Tensor x = Tensor::ones({3}, TensorOptions().requires_grad());
  EXPECT_DDP_ERROR(bag.register_parameter("nonleaf", x * 2.0), ValueError, "is not a leaf");
}

TEST(Module, UndefinedParameterReservesTheNameOnly) {
  TestLinear no_bias(3, 2, false);
  EXPECT_THAT(no_bias.named_parameters().keys(), ElementsAre("weight"));
  EXPECT_THAT(no_bias.state_dict().keys(), ElementsAre("weight"));
  EXPECT_FALSE(no_bias.parameter("bias").defined());
  EXPECT_EQ(no_bias.num_parameters(), 6);
}

TEST(Module, PathsAreSetWhenRegisteredEvenBottomUp) {
  // Built bottom-up: the blocks exist before the stage, the stage before the root.
  auto stage = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 3; ++i) stage->push_back(std::make_shared<Block>(4));
  auto block = stage->at<Block>(2);
  EXPECT_EQ(block->conv2->path(), "2.conv2");
  Bag root;
  EXPECT_EQ(root.path(), "");
  EXPECT_EQ(root.describe(), "Bag");
  root.register_module("layer3", stage);
  EXPECT_EQ(block->conv2->path(), "layer3.2.conv2");
  EXPECT_EQ(block->conv2->describe(), "layer3.2.conv2 (Linear)");
  EXPECT_EQ(stage->path(), "layer3");
  // A layer's errors name where it sits.
  EXPECT_DDP_ERROR(block->conv2->forward(Tensor::zeros({2, 5})), ShapeError,
                   "layer3.2.conv2 (Linear): expected an input [..., 4], got f32[2, 5] on cpu");
}

TEST(Module, LookupByDottedPath) {
  Net net;
  EXPECT_EQ(&net.submodule("layer1.1.bn1"), net.layer1->at<Block>(1)->bn1.get());
  EXPECT_EQ(&net.submodule(""), &net);
  EXPECT_TRUE(
      net.parameter("layer1.0.conv1.weight").is_same(net.layer1->at<Block>(0)->conv1->weight));
  EXPECT_TRUE(net.buffer("bn1.running_mean").is_same(net.bn1->running_mean));
  EXPECT_DDP_ERROR(
      net.submodule("layer1.7.conv1"), ValueError,
      "no submodule 'layer1.7.conv1' (at '7'; children of layer1 (Sequential): [0, 1])");
  EXPECT_DDP_ERROR(net.parameter("fc.w"), ValueError,
                   "no parameter 'fc.w' (parameters of fc (Linear): [weight, bias])");
  EXPECT_DDP_ERROR(net.buffer("bn1.mean"), ValueError, "no buffer 'bn1.mean'");
}

TEST(Module, TrainAndEvalRecurse) {
  Net net;
  EXPECT_TRUE(net.is_training());
  net.eval();
  for (nn::Module* m : net.modules()) EXPECT_FALSE(m->is_training()) << m->describe();
  net.layer1->train();
  EXPECT_FALSE(net.is_training());
  EXPECT_TRUE(net.layer1->at<Block>(1)->bn1->is_training());
  EXPECT_FALSE(net.bn1->is_training());
  net.train(true);
  for (nn::Module* m : net.modules()) EXPECT_TRUE(m->is_training()) << m->describe();
  // The mode changes what a layer does: eval uses running statistics.
  Tensor x = randn({8, 4});
  net.train();
  net.forward(x);
  EXPECT_EQ(net.bn1->num_batches_tracked.item<int64_t>(), 1);
  net.eval();
  net.forward(x);
  EXPECT_EQ(net.bn1->num_batches_tracked.item<int64_t>(), 1);
}

TEST(Module, ToDTypeConvertsFloatingTensorsInPlace) {
  Net net;
  Tensor w = net.fc->weight;
  TensorImpl* impl = w.impl();
  std::vector<double> before = values(w);
  // A gradient, to see that it is converted too.
  sum(net.forward(randn({3, 4}))).backward();
  ASSERT_TRUE(w.grad().defined());
  std::vector<double> grad_before = values(w.grad());

  net.to(kFloat64);
  for (const auto& [name, p] : net.named_parameters()) {
    EXPECT_EQ(p.dtype(), kFloat64) << name;
    EXPECT_TRUE(p.is_leaf() && p.requires_grad()) << name;
  }
  EXPECT_EQ(net.bn1->running_mean.dtype(), kFloat64);
  EXPECT_EQ(net.bn1->num_batches_tracked.dtype(), kInt64);  // integer buffers keep their dtype
  // The same tensor object: members, optimizers and hooks keep working.
  EXPECT_EQ(net.fc->weight.impl(), impl);
  EXPECT_EQ(w.dtype(), kFloat64);
  EXPECT_EQ(values(w), before);  // f32 -> f64 is exact
  EXPECT_EQ(w.grad().dtype(), kFloat64);
  EXPECT_EQ(values(w.grad()), grad_before);
  // It still trains: backward accumulates into the converted gradient.
  sum(net.forward(randn({3, 4}, kFloat64))).backward();
  EXPECT_EQ(w.grad().dtype(), kFloat64);

  net.to(kBFloat16);
  EXPECT_EQ(w.dtype(), kBFloat16);
  EXPECT_EQ(net.bn1->num_batches_tracked.dtype(), kInt64);
  EXPECT_DDP_ERROR(net.to(kInt32), DTypeError, "modules convert to floating dtypes only, got i32");
}

TEST(Module, ToDeviceKeepsTheSameStorageWhenNothingChanges) {
  Net net;
  const void* data = net.fc->weight.data_ptr();
  net.to(Device::cpu());
  net.to(Device::cpu(), kFloat32);
  EXPECT_EQ(net.fc->weight.data_ptr(), data);
  if (!cuda::is_available()) {
    // Without a GPU a move fails before it changes anything.
    EXPECT_THROW(net.to(Device::cuda(0)), DeviceError);
    EXPECT_EQ(net.fc->weight.device(), Device::cpu());
  }
}

TEST(Module, HooksSurviveToDType) {
  TestLinear lin(3, 2);
  int calls = 0;
  DType seen = kFloat32;
  lin.weight.register_post_accumulate_grad_hook([&](Tensor& p) {
    ++calls;
    seen = p.grad().dtype();
  });
  lin.to(kFloat64);
  sum(lin.forward(randn({4, 3}, kFloat64))).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, kFloat64);
}

TEST(Module, TiedParametersAreListedOnceButSavedUnderEachName) {
  Bag root;
  auto a = root.register_module("embed", std::make_shared<TestLinear>(3, 5, false));
  auto head = root.register_module("head", std::make_shared<Bag>());
  head->register_parameter("weight", a->weight);  // tied, as GPT ties wte and lm_head
  EXPECT_THAT(root.named_parameters().keys(), ElementsAre("embed.weight"));
  EXPECT_EQ(root.num_parameters(), 15);
  EXPECT_THAT(root.state_dict().keys(), ElementsAre("embed.weight", "head.weight"));
  root.to(kFloat64);
  EXPECT_EQ(head->parameter("weight").dtype(), kFloat64);
  EXPECT_TRUE(head->parameter("weight").is_same(a->weight));
}

TEST(Module, SharedModulesAreVisitedOnce) {
  Bag root;
  auto shared = std::make_shared<TestLinear>(2, 2);
  root.register_module("first", shared);
  root.register_module("second", shared);
  EXPECT_THAT(root.named_modules().keys(), ElementsAre("", "first"));
  EXPECT_THAT(root.named_parameters().keys(), ElementsAre("first.weight", "first.bias"));
  EXPECT_THAT(root.state_dict().keys(),
              ElementsAre("first.weight", "first.bias", "second.weight", "second.bias"));
  EXPECT_EQ(shared->path(), "second");  // the last registration names it
}

TEST(Module, CyclesAreRejected) {
  auto outer = std::make_shared<Bag>();
  auto inner = outer->register_module("inner", std::make_shared<Bag>());
  EXPECT_DDP_ERROR(inner->register_module("outer", outer), ValueError, "contains this module");
  EXPECT_DDP_ERROR(outer->register_module("self", outer), ValueError, "contains this module");
}

TEST(Module, ZeroGradClearsOrZeroes) {
  TestLinear lin(3, 2);
  sum(lin.forward(randn({4, 3}))).backward();
  Tensor g = lin.weight.grad();
  ASSERT_TRUE(g.defined());
  lin.zero_grad(false);
  EXPECT_TRUE(lin.weight.grad().is_same(g));  // the same buffer, zeroed
  EXPECT_EQ(values(g), std::vector<double>(6, 0.0));
  lin.zero_grad();
  EXPECT_FALSE(lin.weight.grad().defined());
  EXPECT_FALSE(lin.bias.grad().defined());
  lin.zero_grad();  // nothing to clear is fine
}

TEST(Module, NumParameters) {
  Net net;
  // conv1 16, bn1 8, each block 16 + 8 + 16, fc 8 + 2.
  EXPECT_EQ(net.num_parameters(), 16 + 8 + 2 * 40 + 10);
  net.fc->weight.set_requires_grad(false);
  EXPECT_EQ(net.num_parameters(true), 16 + 8 + 2 * 40 + 2);
}

TEST(Module, ApplyVisitsChildrenBeforeParents) {
  Net net;
  std::vector<std::string> order;
  net.layer1->apply([&](nn::Module& m) { order.push_back(m.path()); });
  EXPECT_THAT(
      order, ElementsAre("layer1.0.conv1", "layer1.0.bn1", "layer1.0.conv2", "layer1.0",
                         "layer1.1.conv1", "layer1.1.bn1", "layer1.1.conv2", "layer1.1", "layer1"));
  // The usual use: initialise every layer of a kind.
  net.apply([](nn::Module& m) {
    if (auto* lin = dynamic_cast<TestLinear*>(&m)) nn::init::zeros_(lin->weight);
  });
  EXPECT_EQ(values(net.fc->weight), std::vector<double>(8, 0.0));
}

TEST(Module, ToStringPrintsTheTree) {
  nn::Sequential seq;
  seq.push_back(std::make_shared<TestLinear>(4, 8));
  auto inner = seq.push_back(std::make_shared<nn::Sequential>());
  inner->push_back(relu_module());
  EXPECT_EQ(seq.to_string(),
            "Sequential(\n"
            "  (0): Linear(in_features=4, out_features=8, bias=true)\n"
            "  (1): Sequential(\n"
            "    (0): ReLU()\n"
            "  )\n"
            ")");
}

TEST(OrderedDict, KeepsInsertionOrderAndFindsByKey) {
  nn::OrderedDict<int> d{{"b", 1}, {"a", 2}};
  d.insert("c", 3);
  EXPECT_THAT(d.keys(), ElementsAre("b", "a", "c"));
  EXPECT_EQ(d["a"], 2);
  d.set("b", 10);
  EXPECT_THAT(d.values(), ElementsAre(10, 2, 3));
  EXPECT_TRUE(d.erase("a"));
  EXPECT_FALSE(d.erase("a"));
  EXPECT_THAT(d.keys(), ElementsAre("b", "c"));
  EXPECT_EQ(d.at("c"), 3);
  EXPECT_EQ(d.find("a"), nullptr);
  EXPECT_DDP_ERROR(d.insert("b", 0), ValueError, "key 'b' exists already");
  EXPECT_DDP_ERROR(d.at("zz"), ValueError, "no key 'zz'");
}

}  // namespace
}  // namespace ddp::test
