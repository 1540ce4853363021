#pragma once
// optim::Optimizer: the base of SGD and AdamW, modelled on torch.optim.
// An optimizer holds parameter groups (each with its own learning rate and
// weight decay), per-parameter state (momentum buffers, moment estimates)
// and, through state_dict(), a flat TensorDict that io can write as a
// safetensors file.
//
// Usage:
//   optim::SGD opt(model.parameters(), /*lr=*/0.1, {.momentum = 0.9});
//   loss.backward(); opt.step(); opt.zero_grad();
//
// Note [Fused optimizer steps]
// step() hands each group's parameters that have a gradient to the
// optimizer at once (update_group), and SGD and AdamW update the whole list
// with the multi-tensor ops of src/optim/foreach.h: on a GPU one kernel
// launch per group and dtype (a few hundred tensors per launch), not a chain
// of tensor ops per parameter; on the CPU the same element formula, which
// rounds like torch.optim's step (Note [Foreach numerics]).
//
// Note [Optimizer state layout]
// torch's Optimizer.state_dict() is a nested dict:
//   {"state": {0: {"momentum_buffer": t}, ...},
//    "param_groups": [{"lr": 0.1, ..., "params": [0, 1]}, ...]}
// where parameters are numbered consecutively across the groups in order.
// We flatten it with dots into one TensorDict, so a checkpoint is a plain
// safetensors file:
//   state.<i>.<name>          the state tensor <name> of parameter i, in the
//                             parameter's dtype ("step" is a 0-dim f64)
//   param_groups.<g>.params   i64 [n]: the parameter numbers of group g
//   param_groups.<g>.<option> 0-dim f64 (booleans 0/1), or f64 [k] for a
//                             tuple (AdamW's betas)
// A parameter that has not been stepped yet has no state keys. Loading
// needs an optimizer of the same kind with the same group sizes (parameters
// are matched by number, as in torch) and overwrites its options with the
// saved ones, as torch does.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/tensor/ordered_dict.h"
#include "ddp/tensor/tensor.h"

namespace ddp::optim {

// A set of parameters that share hyperparameters. lr and weight_decay left
// unset take the optimizer's defaults; after construction both are set, and
// a scheduler may change them between steps (group.lr = 0.01).
struct ParamGroup {
  Tensors params;
  std::optional<double> lr;
  std::optional<double> weight_decay;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (an undefined .grad
  // is skipped, like torch), in place and under no-grad.
  void step();
  // step() that skips itself on the device when the device flag found_inf
  // (a 0-dim f32 on the parameters' device, nonzero = skip) is set, without
  // the host reading it: GradScaler's path without host syncs (Note
  // [GradScaler without host syncs] in src/amp/grad_scaler.cpp). Only an
  // optimizer whose skips_on_device() is true takes it (ValueError
  // otherwise); a flag on another device than a parameter is a DeviceError.
  void step(const Tensor& found_inf);
  // Whether step(found_inf) is supported: SGD and AdamW, whose fused kernels
  // read the flag; false for others (e.g. ZeRO-1, which must OR the flag
  // across ranks on the host first).
  virtual bool skips_on_device() const { return false; }
  // Clears every parameter's gradient (set_to_none) or zeroes it in place.
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // "SGD" or "AdamW", for messages.
  const std::string& name() const { return name_; }

  // See Note [Optimizer state layout]. The state tensors are the
  // optimizer's own (not copies); save them before stepping again.
  TensorDict state_dict() const;
  // Checks everything (keys, group sizes, shapes, option values) before it
  // changes anything; bad input raises ValueError naming the key. State
  // tensors are copied, converted to their parameter's dtype and device.
  void load_state_dict(const TensorDict& state);

  // The state of parameter i (numbered across groups), empty before its
  // first step.
  const TensorDict& state(size_t i) const { return state_.at(i); }

  // GradScaler's inf/NaN flag for this optimizer's gradients, as seen on
  // this rank, made the same on every rank. An optimizer that sees only a
  // shard of the gradients (ZeRO-1, ddp/parallel/zero.h) ORs it across
  // ranks (a collective); the default returns it as it is.
  virtual bool found_inf_anywhere(bool local_found_inf) { return local_found_inf; }

  // ---- Note [Deferred optimizer steps] ---------------------------------------
  // An engine that applies the step later, a part of the parameters at a
  // time (DistributedDataParallel::overlap_step: each layer's parameters
  // just before the next forward uses them), takes over step() and
  // zero_grad(): with a Deferral installed, step() records the step (and
  // each group's lr and weight_decay at that moment, so that a scheduler
  // stepped afterwards changes the next step only), zero_grad() records the
  // clearing, and the engine applies both through step_parameters() and
  // zero_grad_parameters(). Whatever reads the optimizer's state first calls
  // synchronize, which applies everything recorded: state_dict(),
  // load_state_dict(), step(found_inf) (which then steps at once), and
  // amp::GradScaler before it reads the gradients. The update of every
  // element is the same as step()'s: SGD and AdamW update each parameter on
  // its own (Note [Fused optimizer steps]).
  struct Deferral {
    std::function<void()> step;
    std::function<void(bool set_to_none)> zero_grad;
    std::function<void()> synchronize;
    // Optional: told when the optimizer is destroyed first.
    std::function<void()> on_destroy;
  };
  // Installs (or, with nullptr, removes) the engine's deferral. ValueError
  // when one is installed already and `deferral` is another.
  void set_deferral(std::shared_ptr<Deferral> deferral);
  bool has_deferral() const { return deferral_ != nullptr; }
  // Runs the deferral's synchronize (nothing without one).
  void synchronize() const;
  // The lr and weight_decay of each group, as step() would use them now.
  struct GroupHyper {
    double lr = 0, weight_decay = 0;
  };
  std::vector<GroupHyper> group_hyperparameters() const;
  // step() for the parameters numbered `numbers` (across groups, as in
  // state_dict) that have a gradient, with each group's lr and
  // weight_decay taken from `hyper` (one per group). The engine's part.
  void step_parameters(const std::vector<size_t>& numbers, const std::vector<GroupHyper>& hyper);
  // zero_grad() for the parameters numbered `numbers`.
  void zero_grad_parameters(const std::vector<size_t>& numbers, bool set_to_none);
  // The number of parameter p in this optimizer (state_dict's numbering),
  // or -1 when p is not one of its parameters.
  int64_t parameter_number(const Tensor& p) const;

 protected:
  // Validates the groups: each non-empty, lr >= 0 and weight_decay >= 0
  // (after filling in the defaults), every parameter a floating leaf that
  // requires grad and in one group only.
  Optimizer(std::string name, std::vector<ParamGroup> groups, double lr, double weight_decay);

  // Replaces the parameters of group g, dropping every parameter's state:
  // for an optimizer over views that are cut anew (ZeRO-1 after a
  // membership change, Note [ZeRO-1 in an elastic job]). ValueError while a
  // step is deferred, or for parameters the constructor would refuse.
  void reset_group_parameters(size_t g, Tensors params);

  // Updates the parameters of one group that have a gradient: params[k]
  // with grads[k] and its state *states[k] (empty before its first step).
  // See Note [Fused optimizer steps].
  virtual void update_group(const ParamGroup& group, const Tensors& params, const Tensors& grads,
                            const std::vector<TensorDict*>& states) = 0;
  // The optimizer-wide options as tensors, keyed by option name (without
  // lr and weight_decay, which are per group).
  virtual TensorDict options_state() const = 0;
  // Validates all of them (ValueError naming the option) and then sets
  // the options from what options_state() wrote; a missing or extra key
  // is an error too.
  virtual void load_options(const TensorDict& options) = 0;
  // The names a non-empty state of one parameter must have exactly, under
  // the current options.
  virtual std::vector<std::string> state_names() const = 0;
  // During step(found_inf), the flag that update_group passes to its fused
  // kernels; undefined during step().
  const Tensor& step_found_inf() const { return found_inf_; }

 private:
  void step_groups();
  void step_selected(const std::vector<char>& selected);
  Tensor found_inf_;
  std::string name_;
  std::vector<ParamGroup> groups_;
  std::vector<TensorDict> state_;  // by parameter number
  std::shared_ptr<Deferral> deferral_;  // Note [Deferred optimizer steps]
};

// Groups from a flat parameter list: one group with the defaults.
std::vector<ParamGroup> single_group(const Tensors& params);

// Throws ValueError "<who>: <what> must be in [lo, hi], got v" (for the
// option checks of the optimizers).
void check_range(const std::string& who, const char* what, double v, double lo, double hi);

}  // namespace ddp::optim
