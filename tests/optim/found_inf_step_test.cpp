// Optimizer::step(found_inf), the step that skips itself when GradScaler's
// device flag is set (Note [GradScaler without host syncs] in
// src/amp/grad_scaler.cpp), and the multi-tensor unscale and scale-update
// kernels behind it, on the CPU: a set flag changes nothing (parameters,
// state, AdamW's step counts), a clear one steps exactly like step(), and a
// run with skipped steps equals a run that never took them.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "ddp/optim/adamw.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/ops.h"
#include "optim/foreach.h"

namespace ddp::test {
namespace {

using optim::AdamW;
using optim::SGD;

Tensor flag(bool set) { return Tensor::scalar(set ? 1.0 : 0.0, DType::f32); }

Tensors make_params(uint64_t seed) {
  Generator gen(seed);
  return {randn({4, 3}, DType::f32, &gen).set_requires_grad(),
          randn({5}, DType::f64, &gen).set_requires_grad()};
}

Tensor grad_for(const Tensor& p, int step) {
  Generator gen(1000 + uint64_t(step) * 7 + uint64_t(p.numel()));
  return randn(p.shape(), DType::f32, &gen).to(p.dtype());
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to(DType::f64).cpu().to_vector<double>() ==
                                       b.to(DType::f64).cpu().to_vector<double>();
}

std::unique_ptr<optim::Optimizer> make_opt(bool adamw, const Tensors& params) {
  if (adamw)
    return std::make_unique<AdamW>(params, 1e-2, optim::AdamWOptions{.amsgrad = true});
  return std::make_unique<SGD>(params, 0.1,
                               optim::SGDOptions{.momentum = 0.9, .dampening = 0.1});
}

// Steps `skip` marks are skipped through the flag in run a and simply not
// taken in run b; both runs end equal, state dicts included (AdamW's step
// counts do not count the skipped steps).
TEST(FoundInfStep, SkippedStepsEqualStepsNeverTaken) {
  const bool skip[] = {true, false, false, true, true, false, true, false};
  for (bool adamw : {false, true}) {
    SCOPED_TRACE(adamw ? "AdamW" : "SGD");
    Tensors a = make_params(1), b = make_params(1);
    auto oa = make_opt(adamw, a), ob = make_opt(adamw, b);
    for (int s = 0; s < int(std::size(skip)); ++s) {
      for (size_t k = 0; k < a.size(); ++k) {
        a[k].set_grad(grad_for(a[k], s));
        b[k].set_grad(grad_for(b[k], s));
      }
      oa->step(flag(skip[s]));
      if (!skip[s]) ob->step();
    }
    for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(same(a[k], b[k])) << "param " << k;
    const TensorDict sa = oa->state_dict(), sb = ob->state_dict();
    ASSERT_EQ(sa.size(), sb.size());
    for (const auto& [key, t] : sb) {
      const Tensor* other = sa.find(key);
      ASSERT_NE(other, nullptr) << key;
      EXPECT_TRUE(same(*other, t)) << key;
    }
    if (adamw) EXPECT_EQ(oa->state(0).at("step").item<double>(), 4.0);
    // A plain step after flagged ones goes on from the same counts.
    for (size_t k = 0; k < a.size(); ++k) {
      a[k].set_grad(grad_for(a[k], 99));
      b[k].set_grad(grad_for(b[k], 99));
    }
    oa->step();
    ob->step();
    for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(same(a[k], b[k])) << "param " << k;
  }
}

// A set flag on the very first step creates no SGD momentum buffer (it
// would stay unwritten) and no AdamW step.
TEST(FoundInfStep, ASkippedFirstStepLeavesNoState) {
  for (bool adamw : {false, true}) {
    Tensors p = make_params(2);
    Tensors before;
    for (const Tensor& t : p) before.push_back(t.detach().clone());
    auto o = make_opt(adamw, p);
    for (Tensor& t : p) t.set_grad(grad_for(t, 0));
    o->step(flag(true));
    for (size_t k = 0; k < p.size(); ++k) EXPECT_TRUE(same(p[k], before[k]));
    if (adamw) {
      EXPECT_EQ(o->state(0).at("step").item<double>(), 0.0);
    } else {
      EXPECT_TRUE(o->state(0).empty());
    }
  }
}

class NotSkipping : public optim::Optimizer {
 public:
  explicit NotSkipping(const Tensors& p)
      : Optimizer("NotSkipping", optim::single_group(p), 0.1, 0) {}

 protected:
  void update_group(const optim::ParamGroup&, const Tensors&, const Tensors&,
                    const std::vector<TensorDict*>&) override {}
  TensorDict options_state() const override { return {}; }
  void load_options(const TensorDict&) override {}
  std::vector<std::string> state_names() const override { return {}; }
};

TEST(FoundInfStep, BadFlagsRaiseValueError) {
  Tensors p = make_params(3);
  for (Tensor& t : p) t.set_grad(grad_for(t, 0));
  SGD sgd(p, 0.1);
  EXPECT_THROW(sgd.step(Tensor()), ValueError);
  EXPECT_THROW(sgd.step(Tensor::zeros({1})), ValueError);                // not 0-dim
  EXPECT_THROW(sgd.step(Tensor::scalar(0.0, DType::f64)), ValueError);  // not f32
  NotSkipping other(p);
  try {
    other.step(flag(false));
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot skip its step on the device"), std::string::npos)
        << e.what();
  }
}

// unscale_ on tensors equals mul_ by the f32 reciprocal and sets the flag
// only for inf/NaN; update_scale_ follows the host rule.
TEST(FoundInfStep, UnscaleAndUpdateScaleKernels) {
  Tensors xs = make_params(4), ys;
  for (Tensor& x : xs) {
    x = x.detach();
    ys.push_back(x.clone());
  }
  Tensor scale = Tensor::scalar(3.0, DType::f32), found = flag(false);
  optim::multi_tensor::unscale_(xs, scale, found);
  EXPECT_FALSE(optim::multi_tensor::mul_(ys, double(float(1.0 / 3.0)), true));
  for (size_t k = 0; k < xs.size(); ++k) EXPECT_TRUE(same(xs[k], ys[k]));
  EXPECT_EQ(found.item<float>(), 0.0f);
  xs[1].narrow(0, 2, 1).fill_(NAN);
  optim::multi_tensor::unscale_(xs, scale, found);
  EXPECT_EQ(found.item<float>(), 1.0f);

  const kernels::ScaleUpdate rule{.growth_factor = 2, .backoff_factor = 0.25, .growth_interval = 2};
  Tensor s = Tensor::scalar(8.0, DType::f32), tracker = Tensor::scalar(0.0, DType::i64);
  float hs = 8;
  int64_t ht = 0;
  for (bool inf : {false, false, false, true, false, false}) {
    optim::multi_tensor::update_scale_(s, tracker, flag(inf), rule);
    kernels::update_scale(hs, ht, inf, rule);
    EXPECT_EQ(s.item<float>(), hs);
    EXPECT_EQ(tracker.item<int64_t>(), ht);
  }
  EXPECT_EQ(hs, 8.0f);  // 8 → 16 (2 good) → backoff 4 → 8 (2 good)
  EXPECT_THROW(optim::multi_tensor::update_scale_(s, tracker.to(DType::f32), flag(false), rule),
               ValueError);
  EXPECT_THROW(optim::multi_tensor::unscale_(xs, Tensor::scalar(1.0, DType::f64), found),
               ValueError);
}

}  // namespace
}  // namespace ddp::test
