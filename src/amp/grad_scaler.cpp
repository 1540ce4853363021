#include "ddp/amp/grad_scaler.h"

#include <cfloat>
#include <cmath>
#include <map>
#include <string>

#include "ddp/autograd/grad_mode.h"
#include "ddp/tensor/ops.h"
#include "optim/foreach.h"

namespace ddp::amp {

namespace {

constexpr const char* kKeys[] = {"scale", "growth_factor", "backoff_factor", "growth_interval",
                                 "_growth_tracker"};

// The checks of the options, shared by the constructor and load_state_dict
// (`who` names the caller, `key` the option).
void check_scale(const char* who, const char* key, double v) {
  DDP_CHECK(v > 0 && v <= FLT_MAX, "{}: {} must be positive and finite in f32, got {}", who, key,
            v);
}
void check_growth_factor(const char* who, const char* key, double v) {
  DDP_CHECK(v > 1 && std::isfinite(v), "{}: {} must be > 1 and finite, got {}", who, key, v);
}
void check_backoff_factor(const char* who, const char* key, double v) {
  DDP_CHECK(v > 0 && v < 1, "{}: {} must be in (0, 1), got {}", who, key, v);
}
void check_count(const char* who, const char* key, double v, double least) {
  DDP_CHECK(v >= least && v < 9.0e15 && v == std::floor(v),
            "{}: {} must be an integer >= {}, got {}", who, key, least, v);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), scale_(float(options.init_scale)) {
  const char* who = "GradScaler";
  check_scale(who, "init_scale", options.init_scale);
  check_growth_factor(who, "growth_factor", options.growth_factor);
  check_backoff_factor(who, "backoff_factor", options.backoff_factor);
  check_count(who, "growth_interval", double(options.growth_interval), 1);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  DDP_CHECK(loss.defined(), "GradScaler.scale: the loss is undefined");
  if (!options_.enabled) return loss;
  DDP_CHECK(is_floating(loss.dtype()), "GradScaler.scale: the loss must be floating, got {}",
            loss.describe());
  return mul(loss, double(scale_));
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!options_.enabled) return;
  PerOptimizer& state = per_optimizer_[&opt];
  DDP_CHECK(state.stage != Stage::kUnscaled,
            "GradScaler.unscale_: already called on this {} optimizer since the last update()",
            opt.name());
  DDP_CHECK(state.stage != Stage::kStepped,
            "GradScaler.unscale_: called after step() on this {} optimizer; call update() first",
            opt.name());
  // torch takes the reciprocal in f64 and rounds it to f32.
  const double inv_scale = double(float(1.0 / double(scale_)));
  std::map<std::string, Tensors> by_device;  // by Device::str(), in a fixed order
  for (const optim::ParamGroup& group : opt.param_groups()) {
    for (const Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      DDP_CHECK(g.dtype() != DType::f16,
                "GradScaler.unscale_: refusing to unscale the f16 gradient of {}; keep the "
                "parameters in f32 (f16 autocast computes in f16 but the weights stay f32)",
                p.describe());
      by_device[g.device().str()].push_back(g);
    }
  }
  NoGradGuard no_grad;
  for (auto& [device, grads] : by_device) {
    state.found_inf =
        optim::multi_tensor::mul_(grads, inv_scale, /*check_finite=*/true) || state.found_inf;
    state.checked = true;
  }
  // A sharded optimizer ORs the flag across ranks (Note [ZeRO-1 with
  // GradScaler and clipping]), so that every rank skips alike.
  state.found_inf = opt.found_inf_anywhere(state.found_inf);
  state.stage = Stage::kUnscaled;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  DDP_CHECK(per_optimizer_[&opt].stage != Stage::kStepped,
            "GradScaler.step: already called on this {} optimizer since the last update()",
            opt.name());
  if (per_optimizer_[&opt].stage == Stage::kReady) unscale_(opt);
  PerOptimizer& state = per_optimizer_[&opt];
  DDP_CHECK(state.checked,
            "GradScaler.step: no gradient of this {} optimizer's parameters was checked for "
            "inf/NaN (none has a gradient); did backward run?",
            opt.name());
  const bool stepped = !state.found_inf;
  if (stepped) opt.step();
  state.stage = Stage::kStepped;
  return stepped;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  bool checked = false, found_inf = false;
  for (const auto& [opt, state] : per_optimizer_) {
    checked = checked || state.checked;
    found_inf = found_inf || state.found_inf;
  }
  DDP_CHECK(checked,
            "GradScaler.update: no inf/NaN checks were recorded since the last update(); call "
            "step(optimizer) (or unscale_) first");
  // f32 arithmetic, as torch's scale tensor.
  if (found_inf) {
    scale_ = scale_ * float(options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (growth_tracker_ + 1 == options_.growth_interval) {
    const float grown = scale_ * float(options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    ++growth_tracker_;
  }
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_scale("GradScaler.update", "new_scale", new_scale);
  scale_ = float(new_scale);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const { return options_.enabled ? double(scale_) : 1.0; }

TensorDict GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  auto f64 = [](double v) { return Tensor::scalar(v, DType::f64); };
  return {{"scale", f64(scale_)},
          {"growth_factor", f64(options_.growth_factor)},
          {"backoff_factor", f64(options_.backoff_factor)},
          {"growth_interval", f64(double(options_.growth_interval))},
          {"_growth_tracker", f64(double(growth_tracker_))}};
}

void GradScaler::load_state_dict(const TensorDict& state) {
  if (!options_.enabled) return;
  const char* who = "GradScaler.load_state_dict";
  DDP_CHECK(!state.empty(),
            "{}: the state dict is empty, as a disabled GradScaler saves it; expected the keys "
            "{}",
            who, fmt::join(kKeys, ", "));
  for (const auto& [key, t] : state) {
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    DDP_CHECK(known, "{}: unexpected key '{}'", who, key);
  }
  std::map<std::string, double> v;
  for (const char* key : kKeys) {
    const Tensor* t = state.find(key);
    DDP_CHECK(t && t->defined(), "{}: missing key '{}'", who, key);
    DDP_CHECK(t->numel() == 1 && t->dim() <= 1, "{}: '{}' must hold one number, got {}", who, key,
              t->describe());
    v[key] = t->to(DType::f64).item<double>();
  }
  check_scale(who, "scale", v["scale"]);
  check_growth_factor(who, "growth_factor", v["growth_factor"]);
  check_backoff_factor(who, "backoff_factor", v["backoff_factor"]);
  check_count(who, "growth_interval", v["growth_interval"], 1);
  check_count(who, "_growth_tracker", v["_growth_tracker"], 0);
  DDP_CHECK(v["_growth_tracker"] < v["growth_interval"],
            "{}: '_growth_tracker' ({}) must be below growth_interval ({})", who,
            v["_growth_tracker"], v["growth_interval"]);
  scale_ = float(v["scale"]);
  options_.growth_factor = v["growth_factor"];
  options_.backoff_factor = v["backoff_factor"];
  options_.growth_interval = int64_t(v["growth_interval"]);
  growth_tracker_ = int64_t(v["_growth_tracker"]);
}

}  // namespace ddp::amp
