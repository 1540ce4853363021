// GradScaler (see include/ddp/amp/grad_scaler.h).
//
// Note [GradScaler without host syncs]
// Reading the inf/NaN flag on the host (found_inf.item()) makes the CPU wait
// until the GPU has finished the whole backward pass and the unscale, every
// step; the CPU then cannot queue the next step's kernels ahead of the GPU,
// which idles while the host launches them. So when an optimizer's
// gradients all lie on one GPU and the optimizer can skip itself on the
// device (SGD and AdamW: Optimizer::skips_on_device), nothing is read back:
// - the scale and the growth tracker live on that GPU (0-dim f32 and i64),
//   made from the host values on first use;
// - scale() multiplies the loss by the device scale;
// - unscale_() runs one kernel per dtype that reads the scale, multiplies
//   by f32(1 / f64(scale)) (torch's reciprocal) and sets a device flag;
// - step() passes the flag to opt.step(found_inf); the fused SGD and AdamW
//   kernels return at once when it is set (AdamW's step counts then live on
//   the device too, so a skipped step is not counted);
// - update() ORs the optimizers' flags with device ops and one kernel
//   applies torch's _amp_update_scale_ rule (kernels::update_scale, the
//   function the CPU path runs too).
// Whatever observes a value waits, lazily and only then: get_scale(),
// growth_tracker(), state_dict(), and converting step()'s StepResult to
// bool. An optimizer that cannot skip on the device (ZeRO-1 ORs the flag
// across ranks on the host) reads the flag in unscale_(), as before; so do
// gradients spread over several devices or lying on the CPU. The CPU path
// is unchanged. Values are the same as the host path's: the same f32
// arithmetic, in the same order.

#include "ddp/amp/grad_scaler.h"

#include <cfloat>
#include <cmath>
#include <map>
#include <string>

#include "ddp/autograd/grad_mode.h"
#include "ddp/optim/multi_tensor.h"
#include "ddp/tensor/ops.h"

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

StepResult StepResult::from_device_flag(Tensor found_inf) {
  StepResult r;
  r.found_inf_ = std::move(found_inf);
  return r;
}

StepResult::operator bool() const {
  if (!known_) known_ = found_inf_.item<float>() == 0.0f;  // waits for the device
  return *known_;
}

bool GradScaler::use_device(const Device& d) const {
  if (!d.is_cuda()) return false;
  if (scale_dev_.defined()) return scale_dev_.device() == d;
  // Kernels fill them (no host-to-device copy, which could wait).
  scale_dev_ = Tensor::full({}, double(scale_), TensorOptions(DType::f32).device(d));
  growth_tracker_dev_ =
      Tensor::full({}, double(growth_tracker_), TensorOptions(DType::i64).device(d));
  return true;
}

float GradScaler::host_scale() const {
  return scale_dev_.defined() ? scale_dev_.item<float>() : scale_;
}

void GradScaler::set_state(float scale, int64_t tracker) {
  scale_ = scale;
  growth_tracker_ = tracker;
  if (scale_dev_.defined()) {
    scale_dev_.fill_(double(scale));
    growth_tracker_dev_.fill_(double(tracker));
  }
}

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), scale_(float(options.init_scale)) {
  const char* who = "GradScaler";
  check_scale(who, "init_scale", options.init_scale);
  check_growth_factor(who, "growth_factor", options.growth_factor);
  check_backoff_factor(who, "backoff_factor", options.backoff_factor);
  check_count(who, "growth_interval", double(options.growth_interval), 1);
}

GradScaler::GradScaler(const GradScaler& other)
    : options_(other.options_),
      scale_(other.scale_),
      growth_tracker_(other.growth_tracker_),
      per_optimizer_(other.per_optimizer_) {
  if (other.scale_dev_.defined()) {
    scale_dev_ = other.scale_dev_.clone();
    growth_tracker_dev_ = other.growth_tracker_dev_.clone();
  }
}

GradScaler& GradScaler::operator=(const GradScaler& other) {
  if (this != &other) *this = GradScaler(other);
  return *this;
}

Tensor GradScaler::scale(const Tensor& loss) const {
  DDP_CHECK(loss.defined(), "GradScaler.scale: the loss is undefined");
  if (!options_.enabled) return loss;
  DDP_CHECK(is_floating(loss.dtype()), "GradScaler.scale: the loss must be floating, got {}",
            loss.describe());
  if (use_device(loss.device())) {
    // In f32 (f64 for an f64 loss) and rounded once to the loss's dtype, as
    // the multiplication by a number computes it.
    const DType ct = loss.dtype() == DType::f64 ? DType::f64 : DType::f32;
    return mul(loss.to(ct), scale_dev_.to(ct)).to(loss.dtype());
  }
  return mul(loss, double(host_scale()));
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
  // Note [Deferred optimizer steps]: gradients still being averaged are
  // waited for before they are read.
  opt.synchronize();
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
  // The device path (Note [GradScaler without host syncs]): one GPU, the
  // flag stays there.
  if (by_device.size() == 1) {
    const Tensors& grads = by_device.begin()->second;
    const Device d = grads[0].device();
    if (use_device(d)) {
      Tensor found = Tensor::zeros({}, TensorOptions(DType::f32).device(d));
      optim::multi_tensor::unscale_(grads, scale_dev_, found);
      state.checked = true;
      state.stage = Stage::kUnscaled;
      if (opt.skips_on_device()) {
        state.found_inf_dev = found;
        return;
      }
      // The optimizer combines the flag on the host (e.g. across ranks).
      state.found_inf = opt.found_inf_anywhere(found.item<float>() != 0.0f);
      return;
    }
  }
  // torch takes the reciprocal in f64 and rounds it to f32.
  const double inv_scale = double(float(1.0 / double(host_scale())));
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

StepResult GradScaler::step(optim::Optimizer& opt) {
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
  state.stage = Stage::kStepped;
  if (state.found_inf_dev.defined()) {  // skips itself on the device
    opt.step(state.found_inf_dev);
    return StepResult::from_device_flag(state.found_inf_dev);
  }
  const bool stepped = !state.found_inf;
  if (stepped) opt.step();
  return stepped;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  bool checked = false, found_inf = false;
  Tensors device_flags;
  for (const auto& [opt, state] : per_optimizer_) {
    checked = checked || state.checked;
    found_inf = found_inf || state.found_inf;
    if (state.found_inf_dev.defined()) device_flags.push_back(state.found_inf_dev);
  }
  DDP_CHECK(checked,
            "GradScaler.update: no inf/NaN checks were recorded since the last update(); call "
            "step(optimizer) (or unscale_) first");
  const optim::multi_tensor::ScaleUpdateRule rule{.growth_factor = options_.growth_factor,
                                                  .backoff_factor = options_.backoff_factor,
                                                  .growth_interval = options_.growth_interval};
  if (scale_dev_.defined()) {
    // The scale lives on the device: OR the flags there and update it there.
    NoGradGuard no_grad;
    const TensorOptions o = TensorOptions(DType::f32).device(scale_dev_.device());
    Tensor any;
    if (found_inf || device_flags.empty()) {
      any = Tensor::full({}, found_inf ? 1.0 : 0.0, o);
    } else {
      any = device_flags[0];
      for (size_t i = 1; i < device_flags.size(); ++i) any = maximum(any, device_flags[i]);
    }
    optim::multi_tensor::update_scale_(scale_dev_, growth_tracker_dev_, any, rule);
  } else {
    optim::multi_tensor::update_scale(scale_, growth_tracker_, found_inf, rule);  // f32, as torch's
  }
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_scale("GradScaler.update", "new_scale", new_scale);
  scale_ = float(new_scale);
  if (scale_dev_.defined()) scale_dev_.fill_(new_scale);  // a kernel: no wait
  per_optimizer_.clear();
}

double GradScaler::get_scale() const { return options_.enabled ? double(host_scale()) : 1.0; }

int64_t GradScaler::growth_tracker() const {
  return growth_tracker_dev_.defined() ? growth_tracker_dev_.item<int64_t>() : growth_tracker_;
}

TensorDict GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  auto f64 = [](double v) { return Tensor::scalar(v, DType::f64); };
  return {{"scale", f64(host_scale())},
          {"growth_factor", f64(options_.growth_factor)},
          {"backoff_factor", f64(options_.backoff_factor)},
          {"growth_interval", f64(double(options_.growth_interval))},
          {"_growth_tracker", f64(double(growth_tracker()))}};
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
  options_.growth_factor = v["growth_factor"];
  options_.backoff_factor = v["backoff_factor"];
  options_.growth_interval = int64_t(v["growth_interval"]);
  set_state(float(v["scale"]), int64_t(v["_growth_tracker"]));
}

}  // namespace ddp::amp
