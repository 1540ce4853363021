// Learning-rate schedules (lr_scheduler.h). See Note [Closed-form schedules].

#include "ddp/optim/lr_scheduler.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "optim_util.h"

namespace ddp::optim {

namespace {

void check_finite_at_least(const std::string& who, const char* what, double v, double lo) {
  DDP_CHECK(std::isfinite(v) && v >= lo, "{}: {} must be finite and >= {}, got {}", who, what, lo,
            v);
}

void check_positive(const std::string& who, const char* what, double v) {
  DDP_CHECK(std::isfinite(v) && v > 0, "{}: {} must be finite and > 0, got {}", who, what, v);
}

// An integer option read back from its f64 tensor, which must hold a whole
// number (2^53 is far beyond any step count).
int64_t whole(const std::string& who, const char* what, double v) {
  DDP_CHECK(std::isfinite(v) && v == std::floor(v) && std::fabs(v) <= 9007199254740992.0,
            "{}: option '{}' must be a whole number, got {}", who, what, v);
  return int64_t(v);
}

Tensor f64_vector(const std::vector<double>& v) {
  return Tensor::from_vector(v, {int64_t(v.size())});
}

}  // namespace

// ---- LRScheduler ------------------------------------------------------------------

LRScheduler::LRScheduler(std::string name, Optimizer& optimizer)
    : name_(std::move(name)), optimizer_(&optimizer) {
  for (const ParamGroup& g : optimizer.param_groups()) base_lrs_.push_back(g.lr.value_or(0.0));
}

void LRScheduler::start() {
  std::vector<double> lrs = lrs_at(0);
  auto& groups = optimizer_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].lr = lrs[g];
}

double LRScheduler::lr_at(int64_t step, size_t group) const {
  DDP_CHECK(step >= 0, "{}: lr_at: step must be >= 0, got {}", name_, step);
  DDP_CHECK(group < base_lrs_.size(), "{}: lr_at: group {} out of range (the optimizer has {})",
            name_, group, base_lrs_.size());
  int64_t last = max_step();
  DDP_CHECK(last < 0 || step <= last,
            "{}: lr_at: step {} is past the end of the schedule ({} steps)", name_, step, last);
  return compute_lr(step, group);
}

std::vector<double> LRScheduler::lrs_at(int64_t step) const {
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs_.size(); ++g) out.push_back(lr_at(step, g));
  return out;
}

void LRScheduler::step() {
  auto& groups = optimizer_->param_groups();
  DDP_CHECK(groups.size() == base_lrs_.size(),
            "{}: the optimizer has {} parameter groups, the scheduler was built for {}", name_,
            groups.size(), base_lrs_.size());
  std::vector<double> lrs = lrs_at(last_step_ + 1);  // may throw: nothing changed yet
  ++last_step_;
  for (size_t g = 0; g < groups.size(); ++g) groups[g].lr = lrs[g];
}

TensorDict LRScheduler::state_dict() const {
  TensorDict out;
  out.insert("last_step", Tensor::scalar(double(last_step_), DType::i64));
  out.insert("base_lrs", f64_vector(base_lrs_));
  for (const auto& [name, t] : options_state()) out.insert(name, t);
  return out;
}

void LRScheduler::load_state_dict(const TensorDict& state) {
  const std::string who = name_ + ".load_state_dict";
  for (const auto& [key, t] : state)
    DDP_CHECK(t.defined(), "{}: key '{}' holds an undefined tensor", who, key);
  const Tensor* last = state.find("last_step");
  DDP_CHECK(last, "{}: missing key 'last_step' (see Note [Scheduler state layout])", who);
  DDP_CHECK(last->numel() == 1 && !is_floating(last->dtype()),
            "{}: 'last_step' must be one integer, got {}", who, last->describe());
  int64_t last_step = last->item<int64_t>();
  DDP_CHECK(last_step >= 0, "{}: 'last_step' must be >= 0, got {}", who, last_step);
  const Tensor* base = state.find("base_lrs");
  DDP_CHECK(base, "{}: missing key 'base_lrs' (see Note [Scheduler state layout])", who);
  DDP_CHECK(base->dim() == 1 && size_t(base->numel()) == base_lrs_.size(),
            "{}: 'base_lrs' is {}, but the optimizer has {} parameter groups", who,
            base->describe(), base_lrs_.size());
  std::vector<double> base_lrs = base->to_vector<double>();
  for (size_t g = 0; g < base_lrs.size(); ++g)
    DDP_CHECK(std::isfinite(base_lrs[g]) && base_lrs[g] >= 0,
              "{}: 'base_lrs' entry {} must be finite and >= 0, got {}", who, g, base_lrs[g]);

  TensorDict options;
  for (const auto& [key, t] : state)
    if (key != "last_step" && key != "base_lrs") options.insert(key, t);
  TensorDict saved = options_state();
  load_options(options);
  std::vector<double> saved_base = base_lrs_;
  base_lrs_ = base_lrs;
  std::vector<double> lrs;
  try {
    lrs = lrs_at(last_step);  // OneCycleLR: last_step within the loaded schedule
  } catch (...) {
    base_lrs_ = saved_base;
    load_options(saved);
    throw;
  }
  last_step_ = last_step;
  auto& groups = optimizer_->param_groups();
  for (size_t g = 0; g < groups.size() && g < lrs.size(); ++g) groups[g].lr = lrs[g];
}

// ---- StepLR -----------------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler("StepLR", optimizer), step_size_(step_size), gamma_(gamma) {
  DDP_CHECK(step_size > 0, "StepLR: step_size must be > 0, got {}", step_size);
  check_finite_at_least("StepLR", "gamma", gamma, 0.0);
  start();
}

double StepLR::compute_lr(int64_t step, size_t group) const {
  return base_lrs()[group] * std::pow(gamma_, double(step / step_size_));
}

TensorDict StepLR::options_state() const {
  return {{"step_size", f64_scalar(double(step_size_))}, {"gamma", f64_scalar(gamma_)}};
}

void StepLR::load_options(const TensorDict& options) {
  OptionReader r(name() + ".load_state_dict", options);
  int64_t step_size = whole(name(), "step_size", r.number("step_size"));
  double gamma = r.number("gamma");
  r.finish();
  DDP_CHECK(step_size > 0, "StepLR.load_state_dict: step_size must be > 0, got {}", step_size);
  check_finite_at_least("StepLR.load_state_dict", "gamma", gamma, 0.0);
  step_size_ = step_size;
  gamma_ = gamma;
}

// ---- WarmupCosineLR ---------------------------------------------------------------

namespace {

void check_warmup_cosine(const std::string& who, int64_t total, const WarmupCosineOptions& o) {
  DDP_CHECK(total > 0, "{}: total_steps must be > 0, got {}", who, total);
  DDP_CHECK(o.warmup_steps >= 0 && o.warmup_steps <= total,
            "{}: warmup_steps must be in [0, total_steps = {}], got {}", who, total,
            o.warmup_steps);
  check_range(who, "start_factor", o.start_factor, 0.0, 1.0);
  check_finite_at_least(who, "min_lr", o.min_lr, 0.0);
}

}  // namespace

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t total_steps,
                               WarmupCosineOptions options)
    : LRScheduler("WarmupCosineLR", optimizer), total_steps_(total_steps), options_(options) {
  check_warmup_cosine(name(), total_steps, options);
  start();
}

double WarmupCosineLR::compute_lr(int64_t step, size_t group) const {
  const double base = base_lrs()[group];
  const int64_t w = options_.warmup_steps;
  if (step < w)
    return base *
           (options_.start_factor + (1.0 - options_.start_factor) * double(step) / double(w));
  if (step >= total_steps_) return options_.min_lr;
  double progress = double(step - w) / double(total_steps_ - w);
  return options_.min_lr +
         (base - options_.min_lr) * (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
}

TensorDict WarmupCosineLR::options_state() const {
  return {{"total_steps", f64_scalar(double(total_steps_))},
          {"warmup_steps", f64_scalar(double(options_.warmup_steps))},
          {"start_factor", f64_scalar(options_.start_factor)},
          {"min_lr", f64_scalar(options_.min_lr)}};
}

void WarmupCosineLR::load_options(const TensorDict& options) {
  const std::string who = name() + ".load_state_dict";
  OptionReader r(who, options);
  int64_t total = whole(who, "total_steps", r.number("total_steps"));
  WarmupCosineOptions o;
  o.warmup_steps = whole(who, "warmup_steps", r.number("warmup_steps"));
  o.start_factor = r.number("start_factor");
  o.min_lr = r.number("min_lr");
  r.finish();
  check_warmup_cosine(who, total, o);
  total_steps_ = total;
  options_ = o;
}

// ---- OneCycleLR -------------------------------------------------------------------

namespace {

void check_one_cycle(const std::string& who, const std::vector<double>& max_lrs, size_t groups,
                     int64_t total, const OneCycleOptions& o) {
  DDP_CHECK(max_lrs.size() == groups, "{}: expected {} max_lr values (one per group), got {}", who,
            groups, max_lrs.size());
  for (size_t g = 0; g < max_lrs.size(); ++g)
    check_finite_at_least(who, fmt::format("max_lr of group {}", g).c_str(), max_lrs[g], 0.0);
  DDP_CHECK(total > 0, "{}: total_steps must be > 0, got {}", who, total);
  check_range(who, "pct_start", o.pct_start, 0.0, 1.0);
  check_positive(who, "div_factor", o.div_factor);
  check_positive(who, "final_div_factor", o.final_div_factor);
  DDP_CHECK(o.anneal == Anneal::cos || o.anneal == Anneal::linear, "{}: unknown anneal strategy",
            who);
  // Step 0 would fall in a warmup phase of length 0, and torch's 0 / 0
  // would make its lr NaN.
  DDP_CHECK(o.pct_start * double(total) != 1.0,
            "{}: pct_start * total_steps = 1 leaves the warmup phase no length (pct_start {}, "
            "total_steps {})",
            who, o.pct_start, total);
}

}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps,
                       OneCycleOptions options)
    : OneCycleLR(optimizer, std::vector<double>(optimizer.param_groups().size(), max_lr),
                 total_steps, options) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
                       OneCycleOptions options)
    : LRScheduler("OneCycleLR", optimizer),
      max_lrs_(std::move(max_lrs)),
      total_steps_(total_steps),
      options_(options) {
  check_one_cycle(name(), max_lrs_, num_groups(), total_steps, options);
  start();
}

// Note [OneCycleLR phases]
// The phase boundaries are torch's, in the same floating-point arithmetic so
// that the lrs agree to the last bits: phase i covers the steps s with
// end[i-1] < s <= end[i] (end[-1] = 0 for the fraction) and anneals from
// its start lr to its end lr with pct = (s - start) / (end - start); the
// last phase takes every step after the ones before it.
double OneCycleLR::compute_lr(int64_t step, size_t group) const {
  const double max_lr = max_lrs_[group];
  const double initial = max_lr / options_.div_factor;
  const double min_lr = initial / options_.final_div_factor;
  if (step >= total_steps_) return min_lr;  // see the class comment
  const double t = double(total_steps_);
  struct Phase {
    double end, from, to;
  };
  Phase phases[3];
  int n = 0;
  phases[n++] = {options_.pct_start * t - 1.0, initial, max_lr};
  if (options_.three_phase) phases[n++] = {2.0 * options_.pct_start * t - 2.0, max_lr, initial};
  phases[n++] = {t - 1.0, options_.three_phase ? initial : max_lr, min_lr};

  const double s = double(step);
  double start = 0.0;
  for (int i = 0; i < n; ++i) {
    const Phase& p = phases[i];
    if (s <= p.end || i == n - 1) {
      double pct = (s - start) / (p.end - start);
      if (options_.anneal == Anneal::linear) return (p.to - p.from) * pct + p.from;
      return p.to + (p.from - p.to) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
    }
    start = p.end;
  }
  return min_lr;  // not reached: the last phase takes every step
}

TensorDict OneCycleLR::options_state() const {
  return {{"max_lr", f64_vector(max_lrs_)},
          {"total_steps", f64_scalar(double(total_steps_))},
          {"pct_start", f64_scalar(options_.pct_start)},
          {"anneal", f64_scalar(options_.anneal == Anneal::cos ? 0.0 : 1.0)},
          {"div_factor", f64_scalar(options_.div_factor)},
          {"final_div_factor", f64_scalar(options_.final_div_factor)},
          {"three_phase", f64_scalar(options_.three_phase)}};
}

void OneCycleLR::load_options(const TensorDict& options) {
  const std::string who = name() + ".load_state_dict";
  OptionReader r(who, options);
  std::vector<double> max_lrs = r.values("max_lr", int64_t(num_groups()));
  int64_t total = whole(who, "total_steps", r.number("total_steps"));
  OneCycleOptions o;
  o.pct_start = r.number("pct_start");
  double anneal = r.number("anneal");
  DDP_CHECK(anneal == 0 || anneal == 1, "{}: option 'anneal' must be 0 (cos) or 1 (linear), got {}",
            who, anneal);
  o.anneal = anneal == 0 ? Anneal::cos : Anneal::linear;
  o.div_factor = r.number("div_factor");
  o.final_div_factor = r.number("final_div_factor");
  o.three_phase = r.flag("three_phase");
  r.finish();
  check_one_cycle(who, max_lrs, num_groups(), total, o);
  max_lrs_ = std::move(max_lrs);
  total_steps_ = total;
  options_ = o;
}

}  // namespace ddp::optim
