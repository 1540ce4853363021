// Tests of the forward hooks of nn::Module (ddp/nn/hooks.h, Note [Forward
// hooks]): order and prepend, replacing inputs and outputs, removable
// handles (also from inside a hook, and after the module is gone), hooks of
// every layer inside ResNet and GPT (the fused paths kept for pre-hooks,
// left for post-hooks), and the bad inputs.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "ddp/nn/models/gpt.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/tensor/generator.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::shared_ptr<nn::Linear> small_linear() {
  manual_seed(3);
  return std::make_shared<nn::Linear>(3, 2);
}

void expect_equal(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  const std::vector<double> x = a.to(DType::f64).to_vector<double>();
  const std::vector<double> y = b.to(DType::f64).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << "element " << i;
}

TEST(ModuleHooks, RunInRegistrationOrderAndPrependGoesFirst) {
  auto lin = small_linear();
  std::vector<std::string> log;
  lin->register_forward_pre_hook([&](nn::Module&, Tensors&) { log.push_back("pre1"); });
  lin->register_forward_pre_hook([&](nn::Module&, Tensors&) { log.push_back("pre2"); });
  lin->register_forward_pre_hook([&](nn::Module&, Tensors&) { log.push_back("pre0"); },
                                 /*prepend=*/true);
  lin->register_forward_hook(
      [&](nn::Module&, const Tensors&, Tensors&) { log.push_back("post1"); });
  lin->register_forward_hook(
      [&](nn::Module&, const Tensors&, Tensors&) { log.push_back("post0"); }, true);
  (*lin)(Tensor::ones({4, 3}));
  EXPECT_THAT(log, ElementsAre("pre0", "pre1", "pre2", "post0", "post1"));
}

TEST(ModuleHooks, PreHookReplacesTheInputAndPostHookTheOutput) {
  auto lin = small_linear();
  const Tensor x = randn({4, 3});
  const Tensor plain = lin->forward(mul(x, Tensor::scalar(2.0f)));
  Tensor seen_in, seen_out;
  lin->register_forward_pre_hook(
      [](nn::Module&, Tensors& in) { in[0] = mul(in[0], Tensor::scalar(2.0f)); });
  lin->register_forward_hook([&](nn::Module& m, const Tensors& in, Tensors& out) {
    EXPECT_EQ(&m, lin.get());
    seen_in = in[0];
    seen_out = out[0];
    out[0] = add(out[0], Tensor::scalar(1.0f));
  });
  const Tensor y = (*lin)(x);
  expect_equal(seen_in, mul(x, Tensor::scalar(2.0f)));  // the post-hook sees the forward's input
  expect_equal(seen_out, plain);
  expect_equal(y, add(plain, Tensor::scalar(1.0f)));
  // forward() itself runs the module alone, as in PyTorch.
  expect_equal(lin->forward(x), lin->forward(x));
  seen_out = Tensor();
  lin->forward(x);
  EXPECT_FALSE(seen_out.defined());
}

TEST(ModuleHooks, HandlesRemoveTheirHookOnlyAndAreIdempotent) {
  auto lin = small_linear();
  int a = 0, b = 0, c = 0;
  nn::HookHandle ha = lin->register_forward_pre_hook([&](nn::Module&, Tensors&) { ++a; });
  nn::HookHandle hb = lin->register_forward_pre_hook([&](nn::Module&, Tensors&) { ++b; });
  nn::HookHandle hc =
      lin->register_forward_hook([&](nn::Module&, const Tensors&, Tensors&) { ++c; });
  (*lin)(Tensor::ones({1, 3}));
  EXPECT_TRUE(ha.active());
  nn::HookHandle copy = ha;
  ha.remove();
  EXPECT_FALSE(ha.active());
  EXPECT_FALSE(copy.active());  // copies name the same hook
  copy.remove();                // and removing it again does nothing
  ha.remove();
  (*lin)(Tensor::ones({1, 3}));
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
  EXPECT_EQ(c, 2);
  hc.remove();
  EXPECT_TRUE(hb.active());
  EXPECT_FALSE(lin->has_forward_hooks());
  EXPECT_TRUE(lin->has_forward_pre_hooks());
  hb.remove();
  EXPECT_FALSE(lin->has_forward_pre_hooks());
  // Destroying a handle leaves its hook in place.
  { nn::HookHandle dropped = lin->register_forward_pre_hook([&](nn::Module&, Tensors&) { ++a; }); }
  (*lin)(Tensor::ones({1, 3}));
  EXPECT_EQ(a, 2);
  // A handle that outlives its module is inert.
  nn::HookHandle orphan;
  {
    auto other = small_linear();
    orphan = other->register_forward_pre_hook([](nn::Module&, Tensors&) {});
    EXPECT_TRUE(orphan.active());
  }
  EXPECT_FALSE(orphan.active());
  orphan.remove();
  nn::HookHandle empty;
  EXPECT_FALSE(empty.active());
  empty.remove();
}

TEST(ModuleHooks, ChangesMadeDuringACallTakeEffectAtTheNextCall) {
  auto lin = small_linear();
  int once = 0, added = 0;
  nn::HookHandle self;
  self = lin->register_forward_pre_hook([&](nn::Module& m, Tensors&) {
    ++once;
    self.remove();  // removes itself: still ran this time
    m.register_forward_pre_hook([&](nn::Module&, Tensors&) { ++added; });
  });
  (*lin)(Tensor::ones({1, 3}));
  EXPECT_EQ(once, 1);
  EXPECT_EQ(added, 0);  // registered during the call: not run by it
  (*lin)(Tensor::ones({1, 3}));
  EXPECT_EQ(once, 1);
  EXPECT_EQ(added, 1);
}

TEST(ModuleHooks, BadHooksAreNamedAndLeaveTheModuleWorking) {
  auto lin = small_linear();
  EXPECT_DDP_ERROR(lin->register_forward_pre_hook(nullptr), ValueError, "register_forward_pre_hook: the hook is empty");
  EXPECT_DDP_ERROR(lin->register_forward_hook(nullptr), ValueError, "register_forward_hook");
  EXPECT_FALSE(lin->has_forward_pre_hooks());

  nn::HookHandle grow =
      lin->register_forward_pre_hook([](nn::Module&, Tensors& in) { in.push_back(in[0]); });
  EXPECT_DDP_ERROR((*lin)(Tensor::ones({1, 3})), ValueError, "changed the number of inputs from 1 to 2");
  grow.remove();

  nn::HookHandle drop =
      lin->register_forward_hook([](nn::Module&, const Tensors&, Tensors& out) { out.clear(); });
  EXPECT_DDP_ERROR((*lin)(Tensor::ones({1, 3})), ValueError, "changed the number of outputs from 1 to 0");
  drop.remove();

  int after = 0;
  nn::HookHandle boom = lin->register_forward_pre_hook(
      [](nn::Module&, Tensors&) { DDP_THROW(ValueError, "hook refused"); });
  lin->register_forward_pre_hook([&](nn::Module&, Tensors&) { ++after; });
  EXPECT_DDP_ERROR((*lin)(Tensor::ones({1, 3})), ValueError, "hook refused");
  EXPECT_EQ(after, 0);  // the hooks after a throwing one do not run
  boom.remove();
  const Tensor x = randn({2, 3});
  expect_equal((*lin)(x), lin->forward(x));
  EXPECT_EQ(after, 1);
}

// Every layer that holds parameters gets a pre-hook: each runs once per
// forward, in the order the forward uses the layers (a fixed order), and
// the output is the same bits as without hooks (the fused BatchNorm + add +
// ReLU is kept).
TEST(ModuleHooks, EveryLayerOfResNetRunsItsPreHookOnceInForwardOrder) {
  manual_seed(5);
  auto model = nn::models::resnet20({.in_channels = 1, .num_classes = 10});
  model->eval();
  const Tensor x = randn({2, 1, 16, 16});
  const Tensor plain = model->forward(x);
  std::vector<std::string> order;
  size_t layers = 0;
  for (const auto& [name, m] : model->named_modules())
    if (!m->parameters(/*recurse=*/false).empty()) {
      ++layers;
      m->register_forward_pre_hook([&order](nn::Module& mod, Tensors&) { order.push_back(mod.path()); });
    }
  const Tensor hooked = model->forward(x);
  expect_equal(hooked, plain);
  ASSERT_EQ(order.size(), layers);
  EXPECT_EQ(order.front(), "conv1");
  EXPECT_EQ(order[1], "bn1");
  EXPECT_EQ(order[2], "layer1.0.conv1");
  EXPECT_EQ(order.back(), "fc");
  // Each layer once; a block's shortcut (downsample) runs before its last
  // BatchNorm, whose fused op adds it.
  std::vector<std::string> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  const auto at = [&](const std::string& p) { return std::find(order.begin(), order.end(), p) - order.begin(); };
  EXPECT_LT(at("layer2.0.conv2"), at("layer2.0.downsample.0"));
  EXPECT_LT(at("layer2.0.downsample.1"), at("layer2.0.bn2"));
  EXPECT_LT(at("layer2.0.bn2"), at("layer2.1.conv1"));
}

// A post-hook on a BatchNorm2d sees that layer's own output: the block runs
// it apart from the fused add + ReLU.
TEST(ModuleHooks, PostHookOnAFusedBatchNormSeesItsOwnOutput) {
  manual_seed(6);
  auto model = nn::models::resnet20({.in_channels = 1, .num_classes = 10});
  model->eval();
  const Tensor x = randn({2, 1, 16, 16});
  const Tensor plain = model->forward(x);
  auto& bn = dynamic_cast<nn::BatchNorm2d&>(model->submodule("layer1.0.bn2"));
  int calls = 0;
  bn.register_forward_hook([&](nn::Module& m, const Tensors& in, Tensors& out) {
    ++calls;
    const Tensor own = dynamic_cast<nn::BatchNorm2d&>(m).forward(in[0]);
    expect_equal(out[0], own);
  });
  const Tensor hooked = model->forward(x);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(allclose(hooked, plain, 1e-5, 1e-6));
}

TEST(ModuleHooks, GptLayersRunTheirHooksAndTheMlpStaysFusedForPreHooks) {
  manual_seed(7);
  nn::models::GPTConfig c;
  c.vocab_size = 32, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 16;
  auto model = std::make_shared<nn::models::GPT>(c);
  model->eval();
  const Tensor tokens = Tensor::from_vector(std::vector<int64_t>{1, 5, 7, 3, 2, 9}, {1, 6});
  const Tensor plain = model->forward(tokens);
  std::vector<std::string> order;
  for (const auto& [name, m] : model->named_modules())
    if (!m->parameters(false).empty() && !name.ends_with("mlp.c_proj"))
      m->register_forward_pre_hook([&order](nn::Module& mod, Tensors&) { order.push_back(mod.path()); });
  expect_equal(model->forward(tokens), plain);
  // wte and wpe, then per block ln_1, attn.c_attn, attn.c_proj, ln_2,
  // mlp.c_fc — c_proj's pre-hook would unfuse the MLP, so it has none
  // here — and ln_f. lm_head is tied to wte.
  EXPECT_EQ(order.front(), "transformer.wte");
  EXPECT_EQ(order[1], "transformer.wpe");
  EXPECT_EQ(order[2], "transformer.h.0.ln_1");
  EXPECT_NE(std::find(order.begin(), order.end(), "transformer.h.1.mlp.c_fc"), order.end());
  EXPECT_EQ(order.back(), "transformer.ln_f");

  // A post-hook on c_fc runs the MLP's layers apart: the hook sees c_fc's
  // own output, and the model's output agrees to rounding.
  auto& fc = model->submodule("transformer.h.0.mlp.c_fc");
  int calls = 0;
  fc.register_forward_hook([&](nn::Module& m, const Tensors& in, Tensors& out) {
    ++calls;
    expect_equal(out[0], dynamic_cast<nn::Linear&>(m).forward(in[0]));
  });
  const Tensor unfused = model->forward(tokens);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(allclose(unfused, plain, 1e-5, 1e-6));
}

}  // namespace
}  // namespace ddp::test
