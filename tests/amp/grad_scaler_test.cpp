// amp::GradScaler: the scale sequence and skip decisions of torch's
// GradScaler on scripted finite and non-finite gradients (golden data from
// tests/golden/make_grad_scaler_golden.py; see Note [GradScaler reference on
// a CPU-only torch] there), the per-step protocol, state dicts and bad
// input.
#include "ddp/amp/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ddp/io/safetensors.h"
#include "ddp/optim/adamw.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"
#include "golden_file.h"

namespace ddp::test {
namespace {

using amp::GradScaler;
using amp::GradScalerOptions;

const nn::TensorDict& scaler_golden() {
  return golden_file("grad_scaler");
}

struct Scenario {
  const char* name;
  GradScalerOptions options;
  bool unscale_first;
  friend void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }
};

// SCENARIOS of make_grad_scaler_golden.py.
const Scenario kScenarios[] = {
    {"basic",
     {.init_scale = 1024, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3},
     false},
    {"unscale_first",
     {.init_scale = 65536, .growth_factor = 4, .backoff_factor = 0.25, .growth_interval = 2},
     true},
    {"overflow_guard",
     {.init_scale = 0x1p126, .growth_factor = 4, .backoff_factor = 0.5, .growth_interval = 1},
     false},
};

class ScalerGolden : public ::testing::TestWithParam<Scenario> {};

TEST_P(ScalerGolden, ScalesSkipsAndParametersMatchTorch) {
  const Scenario sc = GetParam();
  const nn::TensorDict& g = scaler_golden();
  const std::string n = sc.name;
  const std::vector<double> scales = g.at(n + ".scale").to_vector<double>();
  const std::vector<uint8_t> stepped = g.at(n + ".stepped").to_vector<uint8_t>();
  const std::vector<double> trackers = g.at(n + ".growth_tracker").to_vector<double>();
  const int steps = int(stepped.size());
  Tensors params;
  for (int k = 0; k < 2; ++k)
    params.push_back(g.at(n + ".p" + std::to_string(k) + ".init").clone().set_requires_grad());
  optim::SGD opt(params, 0.1);
  GradScaler scaler(sc.options);
  int skipped = 0;
  for (int s = 0; s < steps; ++s) {
    ASSERT_EQ(scaler.get_scale(), scales[s]) << "before step " << s + 1;
    for (int k = 0; k < 2; ++k) {
      const std::string pk = n + ".p" + std::to_string(k);
      Tensor grad = mul(g.at(pk + ".raw_grad").select(0, s), scaler.get_scale());
      const uint8_t bad = g.at(pk + ".bad").to_vector<uint8_t>()[s];
      if (bad)
        grad.view({-1}).narrow(0, 0, 1).fill_(bad == 1 ? INFINITY : bad == 2 ? NAN : -INFINITY);
      params[k].set_grad(grad);
    }
    if (sc.unscale_first) scaler.unscale_(opt);
    const bool did_step = scaler.step(opt);
    EXPECT_EQ(did_step, stepped[s] != 0) << "step " << s + 1;
    skipped += !did_step;
    scaler.update();
    EXPECT_EQ(double(scaler.growth_tracker()), trackers[s]) << "after step " << s + 1;
    // The unscaled gradients are exact (powers of two); the SGD update may
    // differ from torch's by an f32 ulp (torch's vectorised CPU add with
    // alpha can round p + alpha * g once, as a fused multiply-add).
    for (int k = 0; k < 2; ++k) {
      const Tensor& want = g.at(n + ".p" + std::to_string(k) + ".params").select(0, s);
      EXPECT_LE(scaled_error(params[k], want), 1e-6) << "parameter " << k << ", step " << s + 1;
    }
  }
  EXPECT_EQ(scaler.get_scale(), scales[steps]);
  EXPECT_GT(skipped, 0);  // the script really skips steps
}

INSTANTIATE_TEST_SUITE_P(Torch, ScalerGolden, ::testing::ValuesIn(kScenarios),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- the protocol -----------------------------------------------------------------

Tensor leaf(std::vector<float> v) {
  return Tensor::from_vector(v, {int64_t(v.size())}).set_requires_grad();
}

template <class F>
void expect_value_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(GradScaler, DefaultsAreTorchs) {
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.options().growth_factor, 2.0);
  EXPECT_EQ(scaler.options().backoff_factor, 0.5);
  EXPECT_EQ(scaler.options().growth_interval, 2000);
  EXPECT_TRUE(scaler.is_enabled());
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, ScaledLossGivesScaledGradientsAndStepUnscales) {
  Tensor w = leaf({1.0f, 2.0f});
  optim::SGD opt({w}, 0.5);
  GradScaler scaler({.init_scale = 8.0});
  Tensor loss = sum(mul(w, w));  // d/dw = 2w
  Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.item<float>(), 40.0f);
  scaled.backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{16.0f, 32.0f}));
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2.0f, 4.0f}));  // unscaled
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0.0f, 0.0f}));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 8.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  // A low-precision loss keeps its dtype.
  EXPECT_EQ(scaler.scale(Tensor::scalar(1.0, DType::f16)).dtype(), DType::f16);
}

TEST(GradScaler, SkipsOnInfAndNanAndBacksOff) {
  Tensor w = leaf({1.0f, 1.0f});
  Tensor b = Tensor::zeros({1}, DType::bf16).set_requires_grad();  // bf16 grads may be unscaled
  optim::SGD opt({w, b}, 1.0);
  GradScaler scaler({.init_scale = 4.0});
  for (float bad : {INFINITY, NAN}) {
    w.set_grad(Tensor::from_vector(std::vector<float>{1.0f, bad}, {2}));
    b.set_grad(Tensor::full({1}, 4.0, DType::bf16));
    EXPECT_FALSE(scaler.step(opt));
    EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1.0f, 1.0f}));  // not stepped
    EXPECT_EQ(b.to(DType::f32).item<float>(), 0.0f);
    // torch multiplies the gradients even when it skips.
    EXPECT_EQ(w.grad().to_vector<float>()[0], 1.0f / float(scaler.get_scale()));
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, OneUpdateCombinesSeveralOptimizers) {
  Tensor a = leaf({1.0f}), b = leaf({1.0f});
  optim::SGD opt_a({a}, 1.0);
  optim::AdamW opt_b({b}, 0.1);
  GradScaler scaler({.init_scale = 16.0, .growth_interval = 1});
  a.set_grad(Tensor::full({1}, 16.0));
  b.set_grad(Tensor::full({1}, INFINITY));
  EXPECT_TRUE(scaler.step(opt_a));
  EXPECT_FALSE(scaler.step(opt_b));
  EXPECT_EQ(a.item<float>(), 0.0f);
  EXPECT_EQ(b.item<float>(), 1.0f);
  scaler.update();  // an inf in either backs off for both
  EXPECT_EQ(scaler.get_scale(), 8.0);
  a.set_grad(Tensor::full({1}, 8.0));
  b.set_grad(Tensor::full({1}, 8.0));
  EXPECT_TRUE(scaler.step(opt_a));
  EXPECT_TRUE(scaler.step(opt_b));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 16.0);  // growth_interval 1: grows at once
}

TEST(GradScaler, CallOrderIsEnforced) {
  Tensor w = leaf({1.0f});
  optim::SGD opt({w}, 0.1);
  GradScaler scaler;
  expect_value_error([&] { scaler.update(); }, "no inf/NaN checks were recorded");
  expect_value_error([&] { scaler.step(opt); }, "none has a gradient");
  scaler.update(1024.0);  // clears the failed step's record
  w.set_grad(Tensor::ones({1}));
  scaler.unscale_(opt);
  expect_value_error([&] { scaler.unscale_(opt); }, "already called");
  EXPECT_TRUE(scaler.step(opt));  // after an explicit unscale_: no second unscale
  EXPECT_EQ(w.grad().item<float>(), 1.0f / 1024);
  expect_value_error([&] { scaler.step(opt); }, "already called");
  expect_value_error([&] { scaler.unscale_(opt); }, "after step()");
  scaler.update();
  w.set_grad(Tensor::ones({1}));
  EXPECT_TRUE(scaler.step(opt));  // a new step may begin
  scaler.update();
}

TEST(GradScaler, RefusesF16Gradients) {
  Tensor h = Tensor::ones({2}, DType::f16).set_requires_grad();
  optim::SGD opt({h}, 0.1);
  h.set_grad(Tensor::ones({2}, DType::f16));
  GradScaler scaler;
  expect_value_error([&] { scaler.unscale_(opt); }, "f16 gradient");
  EXPECT_EQ(h.grad().to(DType::f32).to_vector<float>(), (std::vector<float>{1.0f, 1.0f}));
}

TEST(GradScaler, UpdateWithNewScale) {
  GradScaler scaler({.init_scale = 4.0, .growth_interval = 5});
  Tensor w = leaf({1.0f});
  optim::SGD opt({w}, 0.1);
  w.set_grad(Tensor::ones({1}));
  scaler.step(opt);
  scaler.update();
  scaler.update(0.5);
  EXPECT_EQ(scaler.get_scale(), 0.5);
  EXPECT_EQ(scaler.growth_tracker(), 1);  // kept, as in torch
  expect_value_error([&] { scaler.update(0.0); }, "new_scale");
  expect_value_error([&] { scaler.update(INFINITY); }, "new_scale");
  expect_value_error([&] { scaler.update(NAN); }, "new_scale");
}

TEST(GradScaler, DisabledIsAPassthrough) {
  Tensor w = leaf({1.0f});
  optim::SGD opt({w}, 1.0);
  GradScaler scaler({.enabled = false});
  Tensor loss = sum(w);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  EXPECT_EQ(scaler.get_scale(), 1.0);
  w.set_grad(Tensor::full({1}, 2.0));
  scaler.unscale_(opt);
  EXPECT_EQ(w.grad().item<float>(), 2.0f);
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(w.item<float>(), -1.0f);
  scaler.update();
  EXPECT_TRUE(scaler.state_dict().empty());
  scaler.load_state_dict({});  // ignored, as in torch
}

// ---- state dicts ------------------------------------------------------------------

TEST(GradScalerStateDict, KeysFollowTorchAndRoundTrip) {
  GradScaler a(
      {.init_scale = 256, .growth_factor = 3, .backoff_factor = 0.25, .growth_interval = 7});
  Tensor w = leaf({1.0f});
  optim::SGD opt({w}, 0.1);
  for (int s = 0; s < 3; ++s) {
    w.set_grad(Tensor::ones({1}));
    a.step(opt);
    a.update();
  }
  nn::TensorDict sd = a.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, t] : sd) {
    keys.push_back(k);
    EXPECT_EQ(t.dtype(), DType::f64) << k;
    EXPECT_EQ(t.dim(), 0) << k;
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"scale", "growth_factor", "backoff_factor",
                                            "growth_interval", "_growth_tracker"}));
  EXPECT_EQ(sd.at("scale").item<double>(), 256.0);
  EXPECT_EQ(sd.at("_growth_tracker").item<double>(), 3.0);
  GradScaler b;
  b.load_state_dict(sd);
  EXPECT_EQ(b.get_scale(), 256.0);
  EXPECT_EQ(b.growth_tracker(), 3);
  EXPECT_EQ(b.options().growth_factor, 3.0);
  EXPECT_EQ(b.options().backoff_factor, 0.25);
  EXPECT_EQ(b.options().growth_interval, 7);
  // Both continue alike: four more good steps reach the interval.
  for (GradScaler* s : {&a, &b}) {
    for (int k = 0; k < 4; ++k) {
      w.set_grad(Tensor::ones({1}));
      s->step(opt);
      s->update();
    }
    EXPECT_EQ(s->get_scale(), 768.0);
  }
}

void expect_rejected(nn::TensorDict sd, const std::string& fragment) {
  GradScaler s({.init_scale = 2.0});
  expect_value_error([&] { s.load_state_dict(sd); }, fragment);
  EXPECT_EQ(s.get_scale(), 2.0);  // nothing taken from a bad dict
  EXPECT_EQ(s.options().growth_interval, 2000);
}

TEST(GradScalerStateDict, RejectsBadDicts) {
  const nn::TensorDict good = GradScaler().state_dict();
  expect_rejected({}, "empty");
  auto with = [&](const std::string& key, Tensor t) {
    nn::TensorDict sd = good;
    sd.at(key) = t;
    return sd;
  };
  auto f64 = [](double v) { return Tensor::scalar(v, DType::f64); };
  nn::TensorDict missing = good;
  missing.erase("backoff_factor");
  expect_rejected(missing, "missing key 'backoff_factor'");
  nn::TensorDict extra = good;
  extra.insert("scale_", f64(1.0));
  expect_rejected(extra, "unexpected key 'scale_'");
  expect_rejected(with("scale", Tensor::ones({2}, DType::f64)), "'scale' must hold one number");
  expect_rejected(with("scale", f64(INFINITY)), "scale must be positive");
  expect_rejected(with("scale", f64(-1.0)), "scale must be positive");
  expect_rejected(with("growth_factor", f64(1.0)), "growth_factor must be > 1");
  expect_rejected(with("backoff_factor", f64(1.5)), "backoff_factor must be in (0, 1)");
  expect_rejected(with("growth_interval", f64(2.5)), "growth_interval must be an integer");
  expect_rejected(with("growth_interval", f64(0.0)), "growth_interval must be an integer >= 1");
  expect_rejected(with("_growth_tracker", f64(-1.0)), "_growth_tracker must be an integer >= 0");
  expect_rejected(with("_growth_tracker", f64(2000.0)), "must be below growth_interval");
  // A torch-style f32 or i64 scalar is read as a number too.
  GradScaler s;
  s.load_state_dict(with("_growth_tracker", Tensor::scalar(5.0, DType::i64)));
  EXPECT_EQ(s.growth_tracker(), 5);
}

TEST(GradScaler, RejectsBadOptions) {
  expect_value_error([] { GradScaler({.init_scale = 0.0}); }, "init_scale");
  expect_value_error([] { GradScaler({.init_scale = 1e39}); }, "init_scale");  // inf in f32
  expect_value_error([] { GradScaler({.growth_factor = 1.0}); }, "growth_factor");
  expect_value_error([] { GradScaler({.backoff_factor = 1.0}); }, "backoff_factor");
  expect_value_error([] { GradScaler({.backoff_factor = 0.0}); }, "backoff_factor");
  expect_value_error([] { GradScaler({.growth_interval = 0}); }, "growth_interval");
  GradScaler scaler;
  expect_value_error([&] { scaler.scale(Tensor()); }, "undefined");
  expect_value_error([&] { scaler.scale(Tensor::ones({1}, DType::i64)); }, "must be floating");
}

}  // namespace
}  // namespace ddp::test
