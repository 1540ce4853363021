// Learning-rate schedulers: torch's sequences (golden data from
// tests/golden/make_lr_scheduler_golden.py), the pure lr_at query, state
// dicts and bad inputs.
#include "ddp/optim/lr_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numbers>

#include "ddp/io/safetensors.h"
#include "ddp/optim/sgd.h"
#include "nn/nn_test_util.h"
#include "golden_file.h"

namespace ddp::test {
namespace {

using optim::Anneal;
using optim::LRScheduler;
using optim::OneCycleLR;
using optim::OneCycleOptions;
using optim::SGD;
using optim::StepLR;
using optim::WarmupCosineLR;
using optim::WarmupCosineOptions;

constexpr int kSteps = 50;  // as STEPS in the golden script

const nn::TensorDict& golden() {
  return golden_file("lr_scheduler");
}

// SGD over two groups with the golden script's BASE_LRS.
struct TwoGroups {
  Tensor a = Tensor::zeros({2}).set_requires_grad();
  Tensor b = Tensor::zeros({2}).set_requires_grad();
  SGD opt{std::vector<optim::ParamGroup>{{{a}, 0.1, std::nullopt}, {{b}, 0.03, std::nullopt}},
          0.1,
          {.momentum = 0.9}};
  double lr(size_t g) { return *opt.param_groups()[g].lr; }
};

std::unique_ptr<LRScheduler> make(const std::string& c, SGD& opt) {
  if (c == "step_lr") return std::make_unique<StepLR>(opt, 7, 0.3);
  if (c == "one_cycle") return std::make_unique<OneCycleLR>(opt, std::vector{0.5, 0.2}, kSteps);
  if (c == "one_cycle_3phase")
    return std::make_unique<OneCycleLR>(
        opt, 0.4, kSteps,
        OneCycleOptions{
            .pct_start = 0.25, .div_factor = 10.0, .final_div_factor = 100.0, .three_phase = true});
  if (c == "one_cycle_linear")
    return std::make_unique<OneCycleLR>(
        opt, std::vector{0.3, 0.1}, kSteps,
        OneCycleOptions{.pct_start = 0.4, .anneal = Anneal::linear});
  if (c == "warmup_cosine")
    return std::make_unique<WarmupCosineLR>(
        opt, kSteps, WarmupCosineOptions{.warmup_steps = 10, .start_factor = 0.01, .min_lr = 1e-4});
  if (c == "warmup_cosine_zero")
    return std::make_unique<WarmupCosineLR>(opt, kSteps, WarmupCosineOptions{.warmup_steps = 5});
  ADD_FAILURE() << "unknown case " << c;
  return nullptr;
}

void expect_rel(double got, double want, const std::string& what) {
  if (want == 0) {
    EXPECT_EQ(got, 0.0) << what;
  } else {
    EXPECT_LE(std::fabs(got - want), 1e-12 * std::fabs(want))
        << what << ": " << got << " vs " << want;
  }
}

class Golden : public ::testing::TestWithParam<const char*> {};

// The lr in the groups after construction and after every step(), and the
// pure query lr_at(s), equal torch's sequence to 1e-12 relative.
TEST_P(Golden, MatchesTorch) {
  const std::string c = GetParam();
  Tensor want = golden().at(c + ".lr");
  ASSERT_EQ(want.shape(), (Shape{kSteps + 1, 2}));
  std::vector<double> w = want.to_vector<double>();
  // OneCycleLR differs from torch at step total_steps only (see lr_scheduler.h).
  bool one_cycle = c.rfind("one_cycle", 0) == 0;
  int last = one_cycle ? kSteps - 1 : kSteps;
  TwoGroups f;
  auto s = make(c, f.opt);
  for (int step = 0; step <= last; ++step) {
    if (step > 0) s->step();
    EXPECT_EQ(s->last_step(), step);
    for (size_t g = 0; g < 2; ++g) {
      std::string what = fmt::format("{} step {} group {}", c, step, g);
      expect_rel(f.lr(g), w[size_t(step) * 2 + g], what);
      EXPECT_EQ(s->lr_at(step, g), f.lr(g)) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LRScheduler, Golden,
                         ::testing::Values("step_lr", "one_cycle", "one_cycle_3phase",
                                           "one_cycle_linear", "warmup_cosine",
                                           "warmup_cosine_zero"));

// ---- semantics ------------------------------------------------------------------

TEST(LRScheduler, LrAtIsAPureQuery) {
  TwoGroups f;
  WarmupCosineLR s(f.opt, 100, {.warmup_steps = 10, .min_lr = 1e-3});
  double at70 = s.lr_at(70, 1);
  EXPECT_EQ(s.last_step(), 0);
  EXPECT_EQ(f.lr(1), 0.0);  // start_factor 0: step 0 trains with lr 0
  for (int k = 0; k < 70; ++k) s.step();
  EXPECT_EQ(f.lr(1), at70);
  EXPECT_EQ(s.lrs_at(70), (std::vector<double>{f.lr(0), f.lr(1)}));
}

TEST(LRScheduler, RemembersBaseLrsAtConstruction) {
  TwoGroups f;
  StepLR s(f.opt, 2, 0.5);
  EXPECT_EQ(s.base_lrs(), (std::vector<double>{0.1, 0.03}));
  s.step();
  s.step();
  EXPECT_EQ(f.lr(0), 0.05);
  f.opt.param_groups()[0].lr = 123.0;  // a manual change is not compounded
  s.step();
  s.step();
  EXPECT_EQ(f.lr(0), 0.025);
}

TEST(LRScheduler, WarmupCosineHoldsMinLrAfterTotalSteps) {
  TwoGroups f;
  WarmupCosineLR s(f.opt, 20, {.warmup_steps = 4, .start_factor = 0.5, .min_lr = 2e-3});
  EXPECT_EQ(s.lr_at(2), 0.1 * (0.5 + 0.5 * 2.0 / 4.0));
  EXPECT_EQ(s.lr_at(4), 0.1);
  EXPECT_NEAR(s.lr_at(12), 2e-3 + (0.1 - 2e-3) * 0.5, 1e-15);  // half way down
  EXPECT_EQ(s.lr_at(20), 2e-3);
  EXPECT_EQ(s.lr_at(1000000), 2e-3);
  EXPECT_EQ(s.lr_at(1000000, 1), 2e-3);
}

TEST(LRScheduler, WarmupAsLongAsTotalIsAllowed) {
  TwoGroups f;
  WarmupCosineLR s(f.opt, 10, {.warmup_steps = 10, .min_lr = 1e-3});
  EXPECT_EQ(s.lr_at(5), 0.05);
  EXPECT_EQ(s.lr_at(10), 1e-3);
}

TEST(LRScheduler, OneCycleHoldsFinalLrAtTotalStepsAndThenRefuses) {
  TwoGroups f;
  OneCycleLR s(f.opt, 0.5, 10, {.anneal = Anneal::linear});
  for (int k = 0; k < 10; ++k) s.step();
  EXPECT_EQ(s.last_step(), 10);
  EXPECT_EQ(f.lr(0), 0.5 / 25.0 / 1e4);  // torch would extrapolate to a negative lr
  EXPECT_DDP_ERROR(s.step(), ValueError, "past the end of the schedule (10 steps)");
  EXPECT_EQ(s.last_step(), 10);
  EXPECT_EQ(f.lr(0), 0.5 / 25.0 / 1e4);
  EXPECT_DDP_ERROR(s.lr_at(11), ValueError, "step 11 is past the end");
}

TEST(LRScheduler, OneCycleIgnoresTheOptimizersLr) {
  TwoGroups f;
  OneCycleLR s(f.opt, 1.0, 100, {.pct_start = 0.25});
  // max_lr / div_factor, up to rounding in torch's cosine formula.
  EXPECT_NEAR(f.lr(0), 1.0 / 25.0, 1e-15);
  EXPECT_NEAR(f.lr(1), 1.0 / 25.0, 1e-15);
  EXPECT_EQ(s.lr_at(24), 1.0);  // the peak: pct_start * total_steps - 1
  EXPECT_LT(s.lr_at(23), 1.0);
  EXPECT_LT(s.lr_at(25), 1.0);
}

// ---- state dicts ------------------------------------------------------------------

TEST(LRSchedulerStateDict, LayoutAndRoundTrip) {
  TwoGroups f;
  OneCycleLR a(f.opt, std::vector{0.5, 0.2}, 40, {.pct_start = 0.2, .three_phase = true});
  for (int k = 0; k < 13; ++k) a.step();
  nn::TensorDict sd = a.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, t] : sd) keys.push_back(k);
  EXPECT_EQ(keys,
            (std::vector<std::string>{"last_step", "base_lrs", "max_lr", "total_steps", "pct_start",
                                      "anneal", "div_factor", "final_div_factor", "three_phase"}));
  EXPECT_EQ(sd.at("last_step").dtype(), DType::i64);
  EXPECT_EQ(sd.at("last_step").item<int64_t>(), 13);
  EXPECT_EQ(sd.at("base_lrs").to_vector<double>(), (std::vector<double>{0.1, 0.03}));

  // A scheduler with other options over an optimizer with other lrs takes
  // the saved ones over, and continues exactly.
  TwoGroups g;
  g.opt.param_groups()[0].lr = 7.0;
  OneCycleLR b(g.opt, 3.0, 1000);
  b.load_state_dict(sd);
  EXPECT_EQ(b.last_step(), 13);
  EXPECT_EQ(b.total_steps(), 40);
  EXPECT_TRUE(b.options().three_phase);
  EXPECT_EQ(b.max_lrs(), (std::vector<double>{0.5, 0.2}));
  EXPECT_EQ(b.base_lrs(), (std::vector<double>{0.1, 0.03}));
  EXPECT_EQ(g.lr(0), f.lr(0));
  EXPECT_EQ(g.lr(1), f.lr(1));
  for (int k = 0; k < 5; ++k) {
    a.step();
    b.step();
    EXPECT_EQ(g.lr(0), f.lr(0));
    EXPECT_EQ(g.lr(1), f.lr(1));
  }
}

TEST(LRSchedulerStateDict, StepLRRoundTrip) {
  TwoGroups f;
  StepLR a(f.opt, 3, 0.5);
  for (int k = 0; k < 7; ++k) a.step();
  TwoGroups g;
  StepLR b(g.opt, 10, 0.9);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.step_size(), 3);
  EXPECT_EQ(b.gamma(), 0.5);
  EXPECT_EQ(g.lr(0), 0.1 * 0.25);
}

// A bad dict raises ValueError naming the key and changes nothing.
TEST(LRSchedulerStateDict, BadDictsChangeNothing) {
  TwoGroups f;
  WarmupCosineLR s(f.opt, 50, {.warmup_steps = 5});
  for (int k = 0; k < 3; ++k) s.step();
  const nn::TensorDict good = s.state_dict();
  const double lr0 = f.lr(0);

  auto without = [&](const std::string& key) {
    nn::TensorDict d;
    for (const auto& [k, t] : good)
      if (k != key) d.insert(k, t);
    return d;
  };
  auto with = [&](const std::string& key, Tensor v) {
    nn::TensorDict d = good;
    d.set(key, v);
    return d;
  };
  EXPECT_DDP_ERROR(s.load_state_dict(without("last_step")), ValueError, "'last_step'");
  EXPECT_DDP_ERROR(s.load_state_dict(without("base_lrs")), ValueError, "'base_lrs'");
  EXPECT_DDP_ERROR(s.load_state_dict(without("min_lr")), ValueError, "'min_lr'");
  EXPECT_DDP_ERROR(s.load_state_dict(with("extra", Tensor::scalar(1.0))), ValueError, "'extra'");
  EXPECT_DDP_ERROR(s.load_state_dict(with("last_step", Tensor::scalar(-1, DType::i64))), ValueError,
                   "'last_step' must be >= 0");
  EXPECT_DDP_ERROR(s.load_state_dict(with("last_step", Tensor::scalar(2.5, DType::f64))),
                   ValueError, "'last_step' must be one integer");
  EXPECT_DDP_ERROR(s.load_state_dict(with("base_lrs", Tensor::ones({3}, DType::f64))), ValueError,
                   "'base_lrs' is f64[3]");
  EXPECT_DDP_ERROR(s.load_state_dict(with("warmup_steps", Tensor::scalar(60.0, DType::f64))),
                   ValueError, "warmup_steps must be in [0, total_steps = 50], got 60");
  EXPECT_DDP_ERROR(s.load_state_dict(with("total_steps", Tensor::scalar(2.5, DType::f64))),
                   ValueError, "'total_steps' must be a whole number");
  EXPECT_DDP_ERROR(s.load_state_dict(with("min_lr", Tensor())), ValueError,
                   "'min_lr' holds an undefined tensor");
  // Another kind of scheduler's dict.
  TwoGroups g;
  StepLR other(g.opt, 2);
  EXPECT_DDP_ERROR(s.load_state_dict(other.state_dict()), ValueError, "missing option");
  EXPECT_EQ(s.last_step(), 3);
  EXPECT_EQ(s.total_steps(), 50);
  EXPECT_EQ(s.options().warmup_steps, 5);
  EXPECT_EQ(f.lr(0), lr0);
}

TEST(LRSchedulerStateDict, OneCycleStepPastTheLoadedEndRestoresOptions) {
  TwoGroups f;
  OneCycleLR a(f.opt, 0.5, 100);
  for (int k = 0; k < 60; ++k) a.step();
  nn::TensorDict sd = a.state_dict();
  sd.set("total_steps", Tensor::scalar(50.0, DType::f64));
  TwoGroups g;
  OneCycleLR b(g.opt, 0.2, 200);
  EXPECT_DDP_ERROR(b.load_state_dict(sd), ValueError, "step 60 is past the end");
  EXPECT_EQ(b.total_steps(), 200);
  EXPECT_EQ(b.max_lrs(), (std::vector<double>{0.2, 0.2}));
  EXPECT_EQ(b.last_step(), 0);
}

// ---- bad arguments --------------------------------------------------------------

TEST(LRSchedulerArgs, BadInputsRaiseValueError) {
  TwoGroups f;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_DDP_ERROR(StepLR(f.opt, 0), ValueError, "StepLR: step_size must be > 0, got 0");
  EXPECT_DDP_ERROR(StepLR(f.opt, -3), ValueError, "step_size must be > 0, got -3");
  EXPECT_DDP_ERROR(StepLR(f.opt, 2, -0.5), ValueError, "gamma must be finite and >= 0");
  EXPECT_DDP_ERROR(StepLR(f.opt, 2, nan), ValueError, "gamma");

  EXPECT_DDP_ERROR(WarmupCosineLR(f.opt, 0), ValueError, "total_steps must be > 0, got 0");
  EXPECT_DDP_ERROR(WarmupCosineLR(f.opt, -5), ValueError, "total_steps must be > 0, got -5");
  EXPECT_DDP_ERROR(WarmupCosineLR(f.opt, 10, {.warmup_steps = 11}), ValueError,
                   "warmup_steps must be in [0, total_steps = 10], got 11");
  EXPECT_DDP_ERROR(WarmupCosineLR(f.opt, 10, {.warmup_steps = -1}), ValueError, "warmup_steps");
  EXPECT_DDP_ERROR(WarmupCosineLR(f.opt, 10, {.start_factor = 1.5}), ValueError, "start_factor");
  EXPECT_DDP_ERROR(WarmupCosineLR(f.opt, 10, {.min_lr = -1e-3}), ValueError,
                   "min_lr must be finite and >= 0");

  EXPECT_DDP_ERROR(OneCycleLR(f.opt, 0.1, 0), ValueError, "total_steps must be > 0, got 0");
  EXPECT_DDP_ERROR(OneCycleLR(f.opt, -0.1, 10), ValueError, "max_lr of group 0");
  EXPECT_DDP_ERROR(OneCycleLR(f.opt, std::vector{0.1, -0.2}, 10), ValueError,
                   "max_lr of group 1 must be finite and >= 0, got -0.2");
  EXPECT_DDP_ERROR(OneCycleLR(f.opt, std::vector{0.1}, 10), ValueError,
                   "expected 2 max_lr values (one per group), got 1");
  EXPECT_DDP_ERROR(OneCycleLR(f.opt, 0.1, 10, {.pct_start = 1.5}), ValueError, "pct_start");
  EXPECT_DDP_ERROR(OneCycleLR(f.opt, 0.1, 10, {.div_factor = 0}), ValueError, "div_factor");
  EXPECT_DDP_ERROR(OneCycleLR(f.opt, 0.1, 10, {.final_div_factor = -1}), ValueError,
                   "final_div_factor");
  EXPECT_DDP_ERROR(OneCycleLR(f.opt, 0.1, 10, {.pct_start = 0.1}), ValueError,
                   "pct_start * total_steps = 1");

  StepLR s(f.opt, 2);
  EXPECT_DDP_ERROR(s.lr_at(-1), ValueError, "step must be >= 0, got -1");
  EXPECT_DDP_ERROR(s.lr_at(0, 2), ValueError, "group 2 out of range (the optimizer has 2)");
  // A failed construction leaves the optimizer's lrs alone.
  EXPECT_EQ(f.lr(0), 0.1);
}

}  // namespace
}  // namespace ddp::test
