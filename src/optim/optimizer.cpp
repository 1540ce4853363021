#include "ddp/optim/optimizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <unordered_set>

#include "ddp/autograd/grad_mode.h"
#include "ddp/tensor/ops.h"

namespace ddp::optim {

std::vector<ParamGroup> single_group(const Tensors& params) { return {ParamGroup{params, {}, {}}}; }

void check_range(const std::string& who, const char* what, double v, double lo, double hi) {
  // Written so that NaN fails too.
  DDP_CHECK(v >= lo && v <= hi, "{}: {} must be in [{}, {}], got {}", who, what, lo, hi, v);
}

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, double lr,
                     double weight_decay)
    : name_(std::move(name)), groups_(std::move(groups)) {
  DDP_CHECK(!groups_.empty(), "{}: got no parameter groups", name_);
  std::unordered_set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup& group = groups_[g];
    DDP_CHECK(!group.params.empty(), "{}: parameter group {} has no parameters", name_, g);
    if (!group.lr) group.lr = lr;
    if (!group.weight_decay) group.weight_decay = weight_decay;
    check_range(fmt::format("{}: group {}", name_, g), "lr", *group.lr, 0.0, HUGE_VAL);
    check_range(fmt::format("{}: group {}", name_, g), "weight_decay", *group.weight_decay, 0.0,
                HUGE_VAL);
    for (size_t k = 0; k < group.params.size(); ++k) {
      const Tensor& p = group.params[k];
      DDP_CHECK(p.defined(), "{}: parameter {} of group {} is undefined", name_, k, g);
      DDP_CHECK(is_floating(p.dtype()) && p.is_leaf() && p.requires_grad(),
                "{}: parameter {} of group {} ({}) must be a floating leaf tensor that "
                "requires grad",
                name_, k, g, p.describe());
      DDP_CHECK(seen.insert(p.impl()).second,
                "{}: parameter {} of group {} ({}) appears more than once", name_, k, g,
                p.describe());
    }
  }
  state_.resize(seen.size());
}

void Optimizer::reset_group_parameters(size_t g, Tensors params) {
  DDP_CHECK(deferral_ == nullptr, "{}: its parameters cannot change while steps are deferred",
            name_);
  DDP_CHECK(g < groups_.size(), "{}: no parameter group {} (it has {})", name_, g, groups_.size());
  DDP_CHECK(!params.empty(), "{}: parameter group {} would have no parameters", name_, g);
  size_t count = 0;
  for (size_t k = 0; k < groups_.size(); ++k) count += k == g ? params.size() : groups_[k].params.size();
  for (const Tensor& p : params)
    DDP_CHECK(p.defined() && is_floating(p.dtype()) && p.is_leaf() && p.requires_grad(),
              "{}: a new parameter of group {} ({}) must be a floating leaf tensor that requires "
              "grad",
              name_, g, p.describe());
  groups_[g].params = std::move(params);
  state_.assign(count, TensorDict());
}

namespace {

// zero_grad's work on one parameter.
void clear_grad(Tensor& p, bool set_to_none) {
  Tensor g = p.grad();
  if (!g.defined()) return;
  if (set_to_none)
    p.set_grad(Tensor());
  else
    g.zero_();
}

}  // namespace

Optimizer::~Optimizer() {
  if (deferral_ && deferral_->on_destroy) deferral_->on_destroy();
}

void Optimizer::step() {
  if (deferral_) {
    deferral_->step();  // Note [Deferred optimizer steps]
    return;
  }
  found_inf_ = Tensor();
  step_groups();
}

void Optimizer::step(const Tensor& found_inf) {
  DDP_CHECK(skips_on_device(),
            "{}.step(found_inf): this optimizer cannot skip its step on the device; call "
            "step() after reading the flag",
            name_);
  DDP_CHECK(found_inf.defined() && found_inf.dim() == 0 && found_inf.dtype() == DType::f32,
            "{}.step(found_inf): found_inf must be a 0-dim f32 tensor, got {}", name_,
            found_inf.defined() ? found_inf.describe() : "an undefined tensor");
  synchronize();  // a step skipped on the device cannot wait: it is applied now
  found_inf_ = found_inf;
  try {
    step_groups();
  } catch (...) {
    found_inf_ = Tensor();
    throw;
  }
  found_inf_ = Tensor();
}

void Optimizer::step_groups() { step_selected({}); }

// Every parameter when `selected` is empty, else those whose entry is set.
void Optimizer::step_selected(const std::vector<char>& selected) {
  NoGradGuard no_grad;
  size_t i = 0;
  for (const ParamGroup& group : groups_) {
    Tensors params, grads;
    std::vector<TensorDict*> states;
    for (const Tensor& p : group.params) {
      Tensor grad = p.grad();
      if (grad.defined() && (selected.empty() || selected[i])) {
        params.push_back(p);
        grads.push_back(grad);
        states.push_back(&state_[i]);
      }
      ++i;
    }
    if (params.empty()) continue;
    update_group(group, params, grads, states);
    for (const Tensor& p : params) p.bump_version();  // Note [Tensor version counter]
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  if (deferral_) {
    deferral_->zero_grad(set_to_none);  // Note [Deferred optimizer steps]
    return;
  }
  NoGradGuard no_grad;
  for (ParamGroup& group : groups_)
    for (Tensor& p : group.params) clear_grad(p, set_to_none);
}

// ---- state dicts ----------------------------------------------------------------

// ---- Note [Deferred optimizer steps] ------------------------------------------

void Optimizer::set_deferral(std::shared_ptr<Deferral> deferral) {
  DDP_CHECK_T(ValueError, !deferral || !deferral_ || deferral_ == deferral,
              "{}: its steps are already deferred by another engine (one "
              "DistributedDataParallel::overlap_step per optimizer)",
              name_);
  DDP_CHECK_T(ValueError,
              !deferral || (deferral->step && deferral->zero_grad && deferral->synchronize),
              "{}.set_deferral: step, zero_grad and synchronize must all be set", name_);
  deferral_ = std::move(deferral);
}

void Optimizer::synchronize() const {
  if (deferral_) deferral_->synchronize();
}

std::vector<Optimizer::GroupHyper> Optimizer::group_hyperparameters() const {
  std::vector<GroupHyper> out;
  for (const ParamGroup& g : groups_) out.push_back({*g.lr, *g.weight_decay});
  return out;
}

int64_t Optimizer::parameter_number(const Tensor& p) const {
  int64_t i = 0;
  for (const ParamGroup& g : groups_)
    for (const Tensor& q : g.params) {
      if (q.impl() == p.impl()) return i;
      ++i;
    }
  return -1;
}

void Optimizer::step_parameters(const std::vector<size_t>& numbers,
                                const std::vector<GroupHyper>& hyper) {
  DDP_CHECK(hyper.size() == groups_.size(),
            "{}.step_parameters: {} hyperparameter sets for {} groups", name_, hyper.size(),
            groups_.size());
  std::vector<char> selected(state_.size(), 0);
  for (size_t n : numbers) {
    DDP_CHECK(n < state_.size(), "{}.step_parameters: parameter {} of {}", name_, n,
              state_.size());
    selected[n] = 1;
  }
  if (numbers.empty()) return;
  // The groups' current values (a scheduler may have moved them since the
  // step was recorded) are put back afterwards.
  const std::vector<GroupHyper> now = group_hyperparameters();
  auto set_hyper = [this](const std::vector<GroupHyper>& h) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      groups_[g].lr = h[g].lr;
      groups_[g].weight_decay = h[g].weight_decay;
    }
  };
  set_hyper(hyper);
  found_inf_ = Tensor();
  try {
    step_selected(selected);
  } catch (...) {
    set_hyper(now);
    throw;
  }
  set_hyper(now);
}

void Optimizer::zero_grad_parameters(const std::vector<size_t>& numbers, bool set_to_none) {
  NoGradGuard no_grad;
  std::vector<Tensor*> by_number;
  for (ParamGroup& g : groups_)
    for (Tensor& p : g.params) by_number.push_back(&p);
  for (size_t n : numbers) {
    DDP_CHECK(n < by_number.size(), "{}.zero_grad_parameters: parameter {} of {}", name_, n,
              by_number.size());
    clear_grad(*by_number[n], set_to_none);
  }
}

TensorDict Optimizer::state_dict() const {
  synchronize();
  TensorDict out;
  for (size_t i = 0; i < state_.size(); ++i)
    for (const auto& [name, t] : state_[i]) out.insert(fmt::format("state.{}.{}", i, name), t);
  int64_t first = 0;
  TensorDict options = options_state();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    auto n = static_cast<int64_t>(group.params.size());
    std::string prefix = fmt::format("param_groups.{}.", g);
    out.insert(prefix + "params", arange(double(first), double(first + n), 1.0, DType::i64));
    out.insert(prefix + "lr", Tensor::scalar(*group.lr, DType::f64));
    out.insert(prefix + "weight_decay", Tensor::scalar(*group.weight_decay, DType::f64));
    for (const auto& [name, t] : options) out.insert(prefix + name, t.clone());
    first += n;
  }
  return out;
}

namespace {

// "state.12.exp_avg" -> (12, "exp_avg"); false when the middle is no number.
bool split_key(const std::string& rest, size_t* index, std::string* name) {
  size_t dot = rest.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == rest.size()) return false;
  auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + dot, *index);
  if (ec != std::errc() || ptr != rest.data() + dot) return false;
  *name = rest.substr(dot + 1);
  return true;
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace

void Optimizer::load_state_dict(const TensorDict& dict) {
  synchronize();
  const std::string who = name_ + ".load_state_dict";
  // Sort the keys into per-parameter state and per-group options.
  std::map<size_t, TensorDict> state, groups;
  for (const auto& [key, t] : dict) {
    DDP_CHECK(t.defined(), "{}: key '{}' holds an undefined tensor", who, key);
    size_t index = 0;
    std::string name;
    bool ok = false;
    if (key.rfind("state.", 0) == 0 && split_key(key.substr(6), &index, &name)) {
      state[index].insert(name, t);
      ok = true;
    } else if (key.rfind("param_groups.", 0) == 0 && split_key(key.substr(13), &index, &name)) {
      groups[index].insert(name, t);
      ok = true;
    }
    DDP_CHECK(ok, "{}: unexpected key '{}' (see Note [Optimizer state layout])", who, key);
  }

  // Groups: the same number, the same sizes, the numbering of state_dict().
  DDP_CHECK(groups.size() == groups_.size() &&
                (groups.empty() || groups.rbegin()->first + 1 == groups.size()),
            "{}: the state dict has {} parameter groups, the optimizer {}", who, groups.size(),
            groups_.size());
  TensorDict options;  // of group 0; the others must agree
  size_t first = 0;
  for (auto& [g, entries] : groups) {
    std::string prefix = fmt::format("param_groups.{}.", g);
    const Tensor* params = entries.find("params");
    DDP_CHECK(params, "{}: missing key '{}params'", who, prefix);
    size_t n = groups_[g].params.size();
    std::vector<int64_t> want(n);
    for (size_t k = 0; k < n; ++k) want[k] = int64_t(first + k);
    DDP_CHECK(
        params->dim() == 1 && !is_floating(params->dtype()) && params->to_vector<int64_t>() == want,
        "{}: '{}params' is {}, but group {} of the optimizer has {} parameters numbered "
        "from {}",
        who, prefix, params->describe(), g, n, first);
    first += n;
    for (const char* hp : {"lr", "weight_decay"}) {
      const Tensor* t = entries.find(hp);
      DDP_CHECK(t && t->numel() == 1, "{}: missing or non-scalar key '{}{}'", who, prefix, hp);
      check_range(who, (prefix + hp).c_str(), t->item<double>(), 0.0, HUGE_VAL);
    }
    TensorDict rest;
    for (const auto& [name, t] : entries)
      if (name != "params" && name != "lr" && name != "weight_decay") rest.insert(name, t);
    if (g == 0) {
      options = rest;
      continue;
    }
    bool agree = rest.size() == options.size();
    for (const auto& [name, t] : rest)
      agree = agree && options.contains(name) && same_values(t, options.at(name));
    DDP_CHECK(agree,
              "{}: group {} has other options than group 0; {} keeps one set of options "
              "besides lr and weight_decay",
              who, g, name_);
  }

  // Options next, since which state a parameter has depends on them; put
  // them back if the state turns out not to fit.
  TensorDict saved_options = options_state();
  load_options(options);
  std::vector<const Tensor*> params;
  for (const ParamGroup& group : groups_)
    for (const Tensor& p : group.params) params.push_back(&p);
  try {
    std::vector<std::string> names = state_names();
    std::sort(names.begin(), names.end());
    for (const auto& [i, entries] : state) {
      DDP_CHECK(i < params.size(), "{}: state for parameter {}, but the optimizer has {}", who, i,
                params.size());
      std::vector<std::string> have;
      for (const auto& [name, t] : entries) {
        have.push_back(name);
        bool scalar = name == "step";
        DDP_CHECK(scalar ? t.numel() == 1 : t.shape() == params[i]->shape(),
                  "{}: 'state.{}.{}' is {}, parameter {} is {}", who, i, name, t.describe(), i,
                  params[i]->describe());
      }
      std::sort(have.begin(), have.end());
      DDP_CHECK(have == names, "{}: parameter {} has state [{}], {} with these options needs [{}]",
                who, i, fmt::join(have, ", "), name_, fmt::join(names, ", "));
    }
  } catch (...) {
    load_options(saved_options);
    throw;
  }

  // Everything fits: commit.
  NoGradGuard no_grad;
  for (auto& [g, entries] : groups) {
    groups_[g].lr = entries.at("lr").item<double>();
    groups_[g].weight_decay = entries.at("weight_decay").item<double>();
  }
  for (auto& s : state_) s.clear();
  for (const auto& [i, entries] : state) {
    const Tensor& p = *params[i];
    for (const auto& [name, t] : entries) {
      // State takes its parameter's layout, whatever the saved one (a
      // checkpoint stores logical order): Note [Optimizer tensors in any
      // dense layout].
      Tensor copy = name == "step" ? Tensor::empty({}, DType::f64) : empty_like(p);
      copy.copy_(name == "step" ? t.reshape({}) : t);
      state_[i].insert(name, copy);
    }
  }
}

}  // namespace ddp::optim
