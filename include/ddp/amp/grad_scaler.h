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
// inf/NaN in one pass (one kernel per device and dtype on a GPU); the skip
// decision reads that flag back, which waits for the device. f16 gradients
// are refused (ValueError), as in torch: the parameters that the optimizer
// updates, and so their gradients, should be f32 master weights.
//
// The scale is held in f32 on the host, and update() follows torch's
// _amp_update_scale_: on inf/NaN, scale *= backoff_factor and the growth
// tracker resets; otherwise the tracker counts the good step, and when it
// reaches growth_interval the scale grows by growth_factor (only if the
// result is finite in f32) and the tracker resets. Not thread-safe.

#include <cstdint>
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

class GradScaler {
 public:
  // ValueError for an option out of range (naming it).
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (in loss's dtype), to call backward on; loss itself when
  // disabled.
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of opt's parameters by the scale in place and
  // records whether any was inf or NaN.
  void unscale_(optim::Optimizer& opt);
  // Unscales (unless unscale_ ran since the last update) and runs opt.step()
  // unless a gradient was inf or NaN. Returns whether it stepped. ValueError
  // when called twice before update(), or when no parameter of opt has a
  // gradient (nothing was checked).
  bool step(optim::Optimizer& opt);
  // Adjusts the scale from this step's inf/NaN checks (see the top of this
  // header) and starts the next step. ValueError when no optimizer was
  // unscaled or stepped since the last update.
  void update();
  // Sets the scale (> 0, finite) instead, keeping the growth tracker.
  void update(double new_scale);

  double get_scale() const;  // 1 when disabled
  int64_t growth_tracker() const { return growth_tracker_; }
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
    bool found_inf = false;  // and one was inf or NaN
  };

  GradScalerOptions options_;
  float scale_;  // f32, like torch's scale tensor
  int64_t growth_tracker_ = 0;
  // This step's record per optimizer, cleared by update().
  std::unordered_map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace ddp::amp
