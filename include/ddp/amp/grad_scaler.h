#pragma once
// amp::GradScaler: dynamic loss scaling for f16 mixed precision, with the
// semantics of torch.cuda.amp.GradScaler. f16 has 5 exponent bits, so small
// gradients underflow to zero; multiplying the loss by a large scale S lifts
// them into range, and the scaler divides them by S again before the
// optimizer steps. When a step's gradients hold an inf or NaN (S was too
// large), the step is skipped and S shrinks; after growth_interval steps in
// a row without one, S grows.
//
//   amp::GradScaler scaler;                  // enabled, scale 2^16
//   for (auto& [x, y] : batches) {
//     opt.zero_grad();
//     Tensor loss = ...;                     // forward under f16 autocast
//     scaler.scale(loss).backward();         // gradients carry the scale
//     scaler.unscale_(opt);                  // optional: true gradients now,
//     optim::clip_grad_norm_(params, 1.0);   //   e.g. for clipping
//     scaler.step(opt);                      // unscales if not yet done;
//     scaler.update();                       //   skips the step on inf/NaN
//   }
//
// bf16 has f32's exponent range, so bf16 training needs no scaler: leave it
// out, or construct it with enabled = false, which makes every call a
// passthrough (scale returns the loss, step just steps, get_scale is 1).
//
// Note [GradScaler under DDP]
// step() runs after backward, when DistributedDataParallel has already
// averaged the gradients across ranks, so every rank unscales the same
// values, finds the same inf/NaN (an inf on one rank makes the average inf
// everywhere) and makes the same skip decision and scale update: the
// replicas stay identical with no extra communication.
//
// Per step, per optimizer: unscale_ at most once (a second call, or one
// after step(), raises ValueError), step at most once, then one update()
// for all optimizers together (an inf seen by any of them shrinks the
// scale). Unscaling multiplies every gradient by 1/S and checks it for
// inf/NaN in one pass (one kernel per device and dtype on a GPU). f16
// gradients are refused (ValueError), as in torch: the parameters that the
// optimizer updates, and so their gradients, should be f32 master weights.
//
// Where it waits for the GPU (Note [GradScaler without host syncs] in
// src/amp/grad_scaler.cpp): when an optimizer's gradients all lie on one
// GPU and it is SGD or AdamW, the scale, the growth tracker and the inf/NaN
// flag stay on that GPU: scale(), unscale_(), step() and update() queue
// kernels and never wait. What reads a device value back waits for the
// device, and only then: get_scale(), growth_tracker(), state_dict(),
// converting step()'s result to bool, a CPU loss or CPU gradients once the
// scale lives on a GPU, and an optimizer that must combine the flag on the
// host (ZeRO-1's collective, or any optimizer other than SGD and AdamW).
// On the CPU nothing changes: the flag is read on the host.
//
// The scale is f32, and update() follows torch's _amp_update_scale_: on
// inf/NaN, scale *= backoff_factor and the growth tracker resets; otherwise
// the tracker counts the good step, and when it reaches growth_interval the
// scale grows by growth_factor (only if the result is finite in f32) and
// the tracker resets. Not thread-safe.

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "ddp/tensor/ordered_dict.h"
#include "ddp/optim/optimizer.h"
#include "ddp/tensor/tensor.h"

namespace ddp::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;     // 2^16; > 0 and finite in f32
  double growth_factor = 2.0;      // > 1
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 2000;  // good steps before the scale grows, >= 1
  bool enabled = true;
};

// What GradScaler::step returns: whether the optimizer stepped (false: a
// gradient was inf or NaN and the step was skipped). On the host path the
// answer is known at once; on the device path it is the device flag, read
// back (waiting for the device, once) only when the result is converted to
// bool, so a loop that ignores the result never waits.
class StepResult {
 public:
  StepResult(bool stepped) : known_(stepped) {}  // NOLINT: implicit, a plain answer
  // The answer is !found_inf (a 0-dim f32 on a device), read when asked.
  static StepResult from_device_flag(Tensor found_inf);
  operator bool() const;  // NOLINT: implicit, so `bool stepped = scaler.step(opt)` works
  // Whether the answer is known without reading the device.
  bool known() const { return known_.has_value(); }

 private:
  StepResult() = default;
  mutable std::optional<bool> known_;
  Tensor found_inf_;
};

class GradScaler {
 public:
  // ValueError for an option out of range (naming it).
  explicit GradScaler(GradScalerOptions options = {});
  // A copy owns its own device scale and tracker (copied on the device).
  GradScaler(const GradScaler& other);
  GradScaler& operator=(const GradScaler& other);
  GradScaler(GradScaler&&) = default;
  GradScaler& operator=(GradScaler&&) = default;

  // loss * scale (in loss's dtype), to call backward on; loss itself when
  // disabled.
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of opt's parameters by the scale in place and
  // records whether any was inf or NaN.
  void unscale_(optim::Optimizer& opt);
  // Unscales (unless unscale_ ran since the last update) and runs opt.step()
  // unless a gradient was inf or NaN (on the device path: opt.step(found_inf),
  // which skips itself on the GPU). Returns whether it stepped (see
  // StepResult). ValueError when called twice before update(), or when no
  // parameter of opt has a gradient (nothing was checked).
  StepResult step(optim::Optimizer& opt);
  // Adjusts the scale from this step's inf/NaN checks (see the top of this
  // header) and starts the next step. ValueError when no optimizer was
  // unscaled or stepped since the last update.
  void update();
  // Sets the scale (> 0, finite) instead, keeping the growth tracker.
  void update(double new_scale);

  double get_scale() const;  // 1 when disabled; waits for the device on the device path
  int64_t growth_tracker() const;  // waits for the device on the device path
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // {"scale", "growth_factor", "backoff_factor", "growth_interval",
  // "_growth_tracker"} as 0-dim f64 tensors, torch's keys; empty when
  // disabled (as torch).
  TensorDict state_dict() const;
  // Checks every key first (ValueError naming a missing, unexpected,
  // non-scalar or out-of-range one) and then takes all of them. An empty
  // dict is an error (it comes from a disabled scaler); a disabled scaler
  // ignores the call, as torch's does.
  void load_state_dict(const TensorDict& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    bool checked = false;    // a gradient was checked for inf/NaN
    bool found_inf = false;  // and one was inf or NaN (host path)
    Tensor found_inf_dev;    // device path: the flag (0-dim f32), never read here
  };

  // The device path's state on device d: creates it from the host values
  // on first use; false when it already lives on another device.
  bool use_device(const Device& d) const;
  float host_scale() const;  // reads the device scale back when it lives there
  void set_state(float scale, int64_t tracker);

  GradScalerOptions options_;
  float scale_;  // f32, like torch's scale tensor; stale once scale_dev_ exists
  int64_t growth_tracker_ = 0;
  // The device path (Note [GradScaler without host syncs]): 0-dim f32 and
  // i64 on one GPU, which then hold the values (made by the const scale()
  // on first use, hence mutable).
  mutable Tensor scale_dev_, growth_tracker_dev_;
  // This step's record per optimizer, cleared by update().
  std::unordered_map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace ddp::amp
