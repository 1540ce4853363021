#pragma once
// The multi-tensor ("foreach") ops that layers above optim use: the
// gradient-norm pass and scaling of ZeRO-1's clipping (src/parallel/zero.cpp)
// and GradScaler's unscale and scale update (src/amp/grad_scaler.cpp). They
// are the ops the optimizers and clip_grad_norm_ run on, so a caller above
// gets the same numerics (Note [Foreach numerics] in src/optim/foreach.h,
// which declares the rest: the fused optimizer steps). Not meant for
// applications; the names may change with their callers.

#include <cstdint>

#include "ddp/tensor/tensor.h"

namespace ddp::optim::multi_tensor {

// Σ |x|^p over all elements of all tensors (p > 0 finite), or max |x| for
// p = inf; NaN when an element is NaN. One pass over the data; reading the
// result back waits for the device. 0 for an empty list.
double pow_sum(const Tensors& xs, double p);

// x *= factor for every tensor, in one pass. With check_finite, returns
// whether any element was inf or NaN before the multiplication (reading the
// flag back waits for the device); otherwise returns false without waiting.
bool mul_(const Tensors& xs, double factor, bool check_finite);

// GradScaler's unscale with no host sync: x *= f32(1 / f64(scale)) for every
// tensor and found_inf = 1 if any element was inf or NaN (else unchanged).
// scale, found_inf: 0-dim f32 on the tensors' device.
void unscale_(const Tensors& xs, const Tensor& scale, const Tensor& found_inf);

// GradScaler's options for one update of its scale (torch's
// _amp_update_scale_ arguments).
struct ScaleUpdateRule {
  double growth_factor = 2, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// GradScaler's scale update on tensors: scale (0-dim f32) and
// growth_tracker (0-dim i64) in place from found_inf (0-dim f32), all on
// one device, with no host sync.
void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                   const ScaleUpdateRule& rule);

// The same update of a host-side f32 scale and tracker (the formula the
// kernels run: on inf/NaN back off and reset; else count the good step and
// grow, if finite in f32, every growth_interval steps).
void update_scale(float& scale, int64_t& growth_tracker, bool found_inf,
                  const ScaleUpdateRule& rule);

}  // namespace ddp::optim::multi_tensor
