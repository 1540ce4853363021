#pragma once
// Learning-rate schedules, modelled on torch.optim.lr_scheduler: a scheduler
// is bound to an optimizer, remembers each parameter group's lr at
// construction (its base lr) and, on step(), writes the lr of the next step
// into every group.
//
// Usage:
//   optim::SGD opt(model->parameters(), /*lr=*/0.1, {.momentum = 0.9});
//   optim::WarmupCosineLR sched(opt, /*total_steps=*/10000, {.warmup_steps = 500});
//   for (...) { loss.backward(); opt.step(); opt.zero_grad(); sched.step(); }
//
// Note [Closed-form schedules]
// torch computes most schedules recursively (the next lr from the current
// one), so the lr of step s is only known by walking steps 0..s. Here every
// schedule is a pure function of (step, base lr, options): lr_at(s) answers
// for any step without touching any state, a trainer can log or plot the
// whole schedule up front, and resuming needs nothing but last_step(). The
// closed forms equal torch's sequences to ~1e-15 relative (the golden test
// asks 1e-12; see tests/golden/make_lr_scheduler_golden.py).
//
// Step numbering follows torch: constructing a scheduler sets every group's
// lr to lr_at(0), the lr of the first optimizer step; after the k-th call of
// step(), last_step() is k and the groups hold lr_at(k).
//
// Note [Scheduler state layout]
// state_dict() is a flat TensorDict, like the optimizer's:
//   last_step   i64 0-dim
//   base_lrs    f64 [groups]
//   <option>    f64 0-dim per option (booleans and enums as numbers), or
//               f64 [groups] for a per-group option (OneCycleLR's max_lr)
// Loading needs a scheduler of the same kind (the option names must match
// exactly) over an optimizer with as many groups; it overwrites the options
// with the saved ones, as torch does, and sets every group's lr to
// lr_at(last_step()), so a scheduler restored alone leaves the optimizer
// consistent with it.

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/tensor/ordered_dict.h"
#include "ddp/optim/optimizer.h"

namespace ddp::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // The lr of parameter group `group` at step `step` (see the numbering
  // above); a pure query, valid for any step >= 0 (OneCycleLR: up to its
  // total_steps). ValueError for a negative step or an unknown group.
  double lr_at(int64_t step, size_t group = 0) const;
  // Every group's lr at `step`.
  std::vector<double> lrs_at(int64_t step) const;

  // Advances to step last_step() + 1 and writes that step's lr into every
  // group. Nothing changes when it throws (OneCycleLR past its end).
  void step();
  int64_t last_step() const { return last_step_; }
  // The groups' lrs at construction (or as loaded).
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // "StepLR", "WarmupCosineLR", "OneCycleLR", for messages.
  const std::string& name() const { return name_; }
  Optimizer& optimizer() const { return *optimizer_; }

  // See Note [Scheduler state layout].
  TensorDict state_dict() const;
  // Checks everything before it changes anything; a bad dict raises
  // ValueError naming the key.
  void load_state_dict(const TensorDict& state);

 protected:
  // Remembers the optimizer's group lrs as the base lrs. The derived
  // constructor validates its options and then calls start().
  LRScheduler(std::string name, Optimizer& optimizer);
  // Writes lr_at(0) into the groups (torch's initial step).
  void start();

  // The lr of `group` at `step`, for a step already checked against
  // max_step().
  virtual double compute_lr(int64_t step, size_t group) const = 0;
  // The last step the schedule defines; -1 for no end.
  virtual int64_t max_step() const { return -1; }
  // The options as tensors by name (see Note [Scheduler state layout]).
  virtual TensorDict options_state() const = 0;
  // Validates all the options (ValueError naming the key) and then sets
  // them; a missing or extra option is an error too.
  virtual void load_options(const TensorDict& options) = 0;

  size_t num_groups() const { return base_lrs_.size(); }

 private:
  std::string name_;
  Optimizer* optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_step_ = 0;
};

// Decays by gamma every step_size steps, as torch's StepLR:
//   lr(s) = base_lr * gamma ^ floor(s / step_size)
class StepLR : public LRScheduler {
 public:
  // step_size > 0; gamma finite and >= 0.
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

  int64_t step_size() const { return step_size_; }
  double gamma() const { return gamma_; }

 protected:
  double compute_lr(int64_t step, size_t group) const override;
  TensorDict options_state() const override;
  void load_options(const TensorDict& options) override;

 private:
  int64_t step_size_;
  double gamma_;
};

struct WarmupCosineOptions {
  int64_t warmup_steps = 0;   // in [0, total_steps]
  double start_factor = 0.0;  // the first lr is start_factor * base_lr; in [0, 1]
  double min_lr = 0.0;        // absolute, the same for every group (torch's eta_min)
};

// Linear warmup from start_factor * base_lr to base_lr over warmup_steps
// steps, then a half cosine from base_lr down to min_lr at total_steps,
// then min_lr for ever. With w = warmup_steps, T = total_steps:
//   s < w:       base_lr * (start_factor + (1 - start_factor) * s / w)
//   w <= s < T:  min_lr + (base_lr - min_lr) * (1 + cos(pi * (s - w) / (T - w))) / 2
//   s >= T:      min_lr
// torch spells this SequentialLR([LinearLR(start_factor, total_iters=w),
// CosineAnnealingLR(T_max=T - w, eta_min=min_lr)], milestones=[w]) up to
// step T (after which torch's cosine climbs again).
class WarmupCosineLR : public LRScheduler {
 public:
  // total_steps > 0; see WarmupCosineOptions for the others.
  WarmupCosineLR(Optimizer& optimizer, int64_t total_steps, WarmupCosineOptions options = {});

  int64_t total_steps() const { return total_steps_; }
  const WarmupCosineOptions& options() const { return options_; }

 protected:
  double compute_lr(int64_t step, size_t group) const override;
  TensorDict options_state() const override;
  void load_options(const TensorDict& options) override;

 private:
  int64_t total_steps_;
  WarmupCosineOptions options_;
};

enum class Anneal { cos, linear };

struct OneCycleOptions {
  double pct_start = 0.3;         // share of the steps spent warming up; in [0, 1]
  Anneal anneal = Anneal::cos;    // torch's anneal_strategy
  double div_factor = 25.0;       // initial_lr = max_lr / div_factor; > 0
  double final_div_factor = 1e4;  // min_lr = initial_lr / final_div_factor; > 0
  bool three_phase = false;       // back down to initial_lr before the final descent
};

// The 1cycle policy of torch's OneCycleLR (Smith & Topin, 2017): up from
// max_lr / div_factor to max_lr over the first pct_start of total_steps,
// then down to initial_lr / final_div_factor (three_phase: down to
// initial_lr, symmetric to the warmup, then to the minimum). The
// optimizer's own lrs are ignored, as in torch. Momentum is NOT cycled
// (torch's cycle_momentum=True default); run torch with
// cycle_momentum=False to compare.
// Steps 0..total_steps - 1 equal torch's; step total_steps (where torch
// extrapolates past the end, to a negative lr with linear annealing) holds
// the final lr; a later step raises ValueError, as in torch.
class OneCycleLR : public LRScheduler {
 public:
  // One max_lr for every group, or one per group; each finite and >= 0.
  // total_steps > 0.
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps,
             OneCycleOptions options = {});
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
             OneCycleOptions options = {});

  const std::vector<double>& max_lrs() const { return max_lrs_; }
  int64_t total_steps() const { return total_steps_; }
  const OneCycleOptions& options() const { return options_; }

 protected:
  double compute_lr(int64_t step, size_t group) const override;
  int64_t max_step() const override { return total_steps_; }
  TensorDict options_state() const override;
  void load_options(const TensorDict& options) override;

 private:
  std::vector<double> max_lrs_;
  int64_t total_steps_;
  OneCycleOptions options_;
};

}  // namespace ddp::optim
