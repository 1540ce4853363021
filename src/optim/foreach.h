#pragma once
// Multi-tensor ("foreach") numerics of the optimizers, the gradient clipping
// and the GradScaler: each op takes whole lists of tensors and, on CUDA,
// runs as one kernel launch per dtype (Note [Multi-tensor launches] in
// kernels/cuda/foreach.cu) instead of a chain of tensor ops per tensor.
// Internal to libddp (src/optim, src/amp).
//
// Note [Foreach numerics]
// One formula per op, in kernels/common/foreach_math.h, is compiled for both
// backends (kernels/cpu/foreach.cpp, kernels/cuda/foreach.cu), which register
// their kernels (kernels/kernel_list.h; Note [Kernel registry]). Each element
// is loaded once into the compute type (f32 for f16/bf16/f32, f64 for f64),
// updated with torch.optim's single-tensor order of operations and stored
// once, so f16/bf16 parameters and their state are updated in f32 and
// rounded once per step. On the CPU nothing is contracted into fused
// multiply-adds, and an f32 or f64 step rounds operation for operation like
// torch's CPU step (the golden tests in tests/optim hold it to 1e-6 and
// 1e-12); the GPU may contract a*b+c into one rounding, so GPU and CPU agree
// to a few f32 ulps per step, not bit for bit. Reductions accumulate in f64.
//
// The lists: params[k] (and every other list's entry k) is one tensor; all
// entries share params[k]'s shape, dtype and device, and every tensor lies
// on one device. Violations raise ValueError (DeviceError for a second
// device) naming the op and the entry. Tensors need not be contiguous: an
// entry whose tensors share one dense layout (channels-last, say) is updated
// in place as flat blocks, and only a non-dense one, or one whose tensors
// disagree in layout, is staged through contiguous copies (Note [Optimizer
// tensors in any dense layout] in foreach.cpp); tensors of several dtypes
// are split into one bucket per dtype.

#include <cstdint>
#include <vector>

#include "common/foreach_math.h"
#include "ddp/tensor/tensor.h"

namespace ddp::optim::multi_tensor {

// One SGD step (ddp/optim/sgd.h) of every params[k] with grads[k]. bufs:
// the momentum buffers (empty when momentum == 0); fresh[k] != 0 marks a
// buffer created for this step, which starts as the gradient.
// found_inf (optional; 0-dim f32 on the parameters' device): GradScaler's
// flag; a nonzero value skips the step on the device, with no host read
// (Note [GradScaler without host syncs] in src/amp/grad_scaler.cpp).
void sgd_step(const Tensors& params, const Tensors& grads, const Tensors& bufs,
              const std::vector<uint8_t>& fresh, const kernels::SgdScalars& s,
              const Tensor& found_inf = {});

// One AdamW step (ddp/optim/adamw.h); max_exp_avg_sqs is empty without
// amsgrad; per_tensor[k] holds params[k]'s bias corrections, or, when steps
// is non-empty (and per_tensor empty), steps[k] is params[k]'s step count as
// a 0-dim f64 on the parameters' device, counted and used on the device.
// found_inf as for sgd_step (a skipped step is not counted).
void adamw_step(const Tensors& params, const Tensors& grads, const Tensors& exp_avgs,
                const Tensors& exp_avg_sqs, const Tensors& max_exp_avg_sqs,
                const std::vector<kernels::AdamWTensorScalars>& per_tensor,
                const kernels::AdamWScalars& s, const Tensors& steps = {},
                const Tensor& found_inf = {});

// Contiguous copies made so far (process-wide) for tensors that could not be
// updated in place (Note [Optimizer tensors in any dense layout]): 0 for a
// model of dense parameters whatever their layout. For tests and profiling.
int64_t staged_copies();

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

// GradScaler's scale update on tensors (kernels::update_scale): scale (0-dim
// f32) and growth_tracker (0-dim i64) in place from found_inf (0-dim f32),
// all on one device, with no host sync.
void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                   const kernels::ScaleUpdate& u);

}  // namespace ddp::optim::multi_tensor
