// Optimizer::state_dict / load_state_dict: the layout of
// Note [Optimizer state layout], resuming through a safetensors file, and
// every way a state dict can fail to fit.
#include <gtest/gtest.h>

#include "io/io_test_util.h"
#include "optim/optim_test_util.h"

namespace ddp::test {
namespace {

using optim::AdamW;
using optim::AdamWOptions;
using optim::SGD;
using optim::SGDOptions;

Tensors clones(const Tensors& ps) {
  Tensors out;
  for (const Tensor& p : ps) out.push_back(p.detach().clone().set_requires_grad());
  return out;
}

class Resume : public ::testing::TestWithParam<const char*> {};

// Two steps, save to a file, load into a fresh optimizer over copies of the
// parameters, three more steps: bit for bit the uninterrupted run.
TEST_P(Resume, ThroughSafetensorsMatchesUninterrupted) {
  const std::string name = GetParam();
  ScratchDir dir;
  Tensors params = golden_params(name, DType::f32);
  auto opt = golden_optimizer(name, params);
  for (int s = 0; s < 2; ++s) {
    set_golden_grads(name, DType::f32, params, s);
    opt->step();
  }
  io::save_safetensors(dir.path("opt.safetensors"), opt->state_dict());
  Tensors resumed = clones(params);
  auto opt2 = golden_optimizer(name, resumed);
  opt2->load_state_dict(io::load_safetensors(dir.path("opt.safetensors")));
  for (int s = 2; s < kGoldenSteps; ++s) {
    set_golden_grads(name, DType::f32, params, s);
    set_golden_grads(name, DType::f32, resumed, s);
    opt->step();
    opt2->step();
    for (int k = 0; k < kGoldenParams; ++k)
      EXPECT_EQ(max_abs_error(resumed[k], params[k]), 0.0) << name << " step " << s + 1;
  }
  EXPECT_LE(golden_error(name, DType::f32, resumed, kGoldenSteps - 1), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Golden, Resume,
                         ::testing::Values("sgd_momentum", "sgd_nesterov", "adamw_default",
                                           "adamw_amsgrad", "adamw_groups"));

TEST(OptimStateDict, AdamWKeysFollowTorchLayout) {
  Tensors p = {Tensor::ones({2, 3}).set_requires_grad(), Tensor::ones({4}).set_requires_grad()};
  AdamW opt({{{p[0]}, 0.1, std::nullopt}, {{p[1]}, std::nullopt, 0.0}}, 0.01,
            AdamWOptions{.amsgrad = true});
  Tensor(p[0]).set_grad(Tensor::ones({2, 3}));  // p[1] has no grad: no state
  opt.step();
  opt.step();
  nn::TensorDict sd = opt.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, t] : sd) keys.push_back(k);
  std::vector<std::string> want = {"state.0.step",
                                   "state.0.exp_avg",
                                   "state.0.exp_avg_sq",
                                   "state.0.max_exp_avg_sq",
                                   "param_groups.0.params",
                                   "param_groups.0.lr",
                                   "param_groups.0.weight_decay",
                                   "param_groups.0.betas",
                                   "param_groups.0.eps",
                                   "param_groups.0.amsgrad",
                                   "param_groups.0.maximize",
                                   "param_groups.1.params",
                                   "param_groups.1.lr",
                                   "param_groups.1.weight_decay",
                                   "param_groups.1.betas",
                                   "param_groups.1.eps",
                                   "param_groups.1.amsgrad",
                                   "param_groups.1.maximize"};
  EXPECT_EQ(keys, want);
  EXPECT_EQ(sd.at("state.0.step").dtype(), DType::f64);
  EXPECT_EQ(sd.at("state.0.step").dim(), 0);
  EXPECT_EQ(sd.at("state.0.step").item<double>(), 2.0);
  EXPECT_EQ(sd.at("state.0.exp_avg").shape(), (Shape{2, 3}));
  EXPECT_EQ(sd.at("param_groups.0.lr").dtype(), DType::f64);
  EXPECT_EQ(sd.at("param_groups.0.lr").item<double>(), 0.1);
  EXPECT_EQ(sd.at("param_groups.1.lr").item<double>(), 0.01);
  EXPECT_EQ(sd.at("param_groups.0.weight_decay").item<double>(), 1e-2);
  EXPECT_EQ(sd.at("param_groups.1.weight_decay").item<double>(), 0.0);
  EXPECT_EQ(sd.at("param_groups.1.params").to_vector<int64_t>(), std::vector<int64_t>{1});
  EXPECT_EQ(sd.at("param_groups.0.betas").to_vector<double>(), (std::vector<double>{0.9, 0.999}));
  EXPECT_EQ(sd.at("param_groups.0.amsgrad").item<double>(), 1.0);
}

TEST(OptimStateDict, SgdWithoutMomentumHasNoState) {
  Tensor p = Tensor::ones({3}).set_requires_grad();
  SGD opt({p}, 0.1);
  p.set_grad(Tensor::ones({3}));
  opt.step();
  for (const auto& [k, t] : opt.state_dict())
    EXPECT_EQ(k.rfind("state.", 0), std::string::npos) << k;
  EXPECT_TRUE(opt.state(0).empty());
}

TEST(OptimStateDict, LoadSetsOptionsAndGroupHyperparameters) {
  Tensor p = Tensor::ones({3}).set_requires_grad();
  SGD a({p}, 0.5, SGDOptions{.momentum = 0.9, .weight_decay = 0.1, .nesterov = true});
  Tensor q = Tensor::ones({3}).set_requires_grad();
  SGD b({q}, 0.1);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(*b.param_groups()[0].lr, 0.5);
  EXPECT_EQ(*b.param_groups()[0].weight_decay, 0.1);
  EXPECT_EQ(b.options().momentum, 0.9);
  EXPECT_TRUE(b.options().nesterov);
}

TEST(OptimStateDict, LoadConvertsStateToTheParameterDtype) {
  Tensor p = Tensor::ones({3}).set_requires_grad();
  SGD a({p}, 0.1, SGDOptions{.momentum = 0.9});
  p.set_grad(Tensor::ones({3}));
  a.step();
  Tensor q = Tensor::ones({3}, DType::f64).set_requires_grad();
  SGD b({q}, 0.1, SGDOptions{.momentum = 0.9});
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.state(0).at("momentum_buffer").dtype(), DType::f64);
  // A copy, not the other optimizer's tensor.
  EXPECT_FALSE(b.state(0).at("momentum_buffer").is_same(a.state(0).at("momentum_buffer")));
}

// ---- bad state dicts ---------------------------------------------------------

struct Fixture {
  Tensors p = {Tensor::ones({2, 2}).set_requires_grad(), Tensor::ones({3}).set_requires_grad()};
  AdamW opt{p, 0.01};
  nn::TensorDict sd;
  Fixture() {
    for (Tensor& t : p) t.set_grad(Tensor::ones(t.shape()));
    opt.step();
    sd = opt.state_dict();
  }
};

void expect_rejected(const nn::TensorDict& sd, const std::string& fragment) {
  Tensors p = {Tensor::ones({2, 2}).set_requires_grad(), Tensor::ones({3}).set_requires_grad()};
  AdamW fresh(p, 0.2);
  try {
    fresh.load_state_dict(sd);
    ADD_FAILURE() << "accepted a state dict that should fail with '" << fragment << "'";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
  // A failed load changes nothing.
  EXPECT_EQ(*fresh.param_groups()[0].lr, 0.2);
  EXPECT_FALSE(fresh.options().amsgrad);
  EXPECT_TRUE(fresh.state(0).empty());
}

TEST(OptimStateDict, RejectsUnknownKeys) {
  Fixture f;
  f.sd.insert("momentum", Tensor::scalar(1.0));
  expect_rejected(f.sd, "unexpected key 'momentum'");
  Fixture g;
  g.sd.insert("state.x.exp_avg", Tensor::ones({3}));
  expect_rejected(g.sd, "unexpected key 'state.x.exp_avg'");
}

TEST(OptimStateDict, RejectsMismatchedGroups) {
  Fixture f;
  f.sd.at("param_groups.0.params") = arange(int64_t(1));
  expect_rejected(f.sd, "param_groups.0.params");
  Fixture g;
  g.sd.insert("param_groups.1.params", arange(int64_t(1)));
  expect_rejected(g.sd, "2 parameter groups");
  Fixture h;
  h.sd.erase("param_groups.0.lr");
  expect_rejected(h.sd, "'param_groups.0.lr'");
  Fixture i;
  i.sd.at("param_groups.0.lr") = Tensor::scalar(-1.0, DType::f64);
  expect_rejected(i.sd, "lr must be in");
}

TEST(OptimStateDict, RejectsBadOptions) {
  Fixture f;
  f.sd.erase("param_groups.0.eps");
  expect_rejected(f.sd, "missing option 'eps'");
  Fixture g;
  g.sd.insert("param_groups.0.momentum", Tensor::scalar(0.9, DType::f64));  // an SGD option
  expect_rejected(g.sd, "unexpected option 'momentum'");
  Fixture h;
  h.sd.at("param_groups.0.betas") = Tensor::from_vector(std::vector<double>{0.9, 1.0}, {2});
  expect_rejected(h.sd, "betas[1]");
  Fixture i;
  i.sd.at("param_groups.0.amsgrad") = Tensor::scalar(0.5, DType::f64);
  expect_rejected(i.sd, "must be 0 or 1");
}

TEST(OptimStateDict, RejectsMismatchedState) {
  Fixture f;
  f.sd.at("state.1.exp_avg") = Tensor::ones({4});
  expect_rejected(f.sd, "'state.1.exp_avg'");
  Fixture g;
  g.sd.erase("state.0.exp_avg_sq");
  expect_rejected(g.sd, "parameter 0 has state [exp_avg, step]");
  Fixture h;
  h.sd.insert("state.2.exp_avg", Tensor::ones({3}));
  expect_rejected(h.sd, "state for parameter 2");
  // amsgrad on in the dict, but no max_exp_avg_sq: the options are put back.
  Fixture i;
  i.sd.at("param_groups.0.amsgrad") = Tensor::scalar(1.0, DType::f64);
  expect_rejected(i.sd, "max_exp_avg_sq");
}

}  // namespace
}  // namespace ddp::test
