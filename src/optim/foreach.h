#pragma once
// Multi-tensor ("foreach") numerics of the optimizers, the gradient clipping
// and the GradScaler: each op takes whole lists of tensors and, on CUDA,
// runs as one kernel launch per dtype (Note [Multi-tensor launches] in
// kernels/cuda/foreach.cu) instead of a chain of tensor ops per tensor.
// Internal to the optim layer; what the layers above use (pow_sum, mul_,
// unscale_, the scale update) is declared in ddp/optim/multi_tensor.h.
//
// Note [Foreach numerics]
// One formula per op, in kernels/common/foreach_math.h, is compiled for both
// backends (kernels/cpu/foreach.cpp, kernels/cuda/foreach.cu), which register
// their kernels (kernels/kernel_list.h; Note [Kernel registry]). Each element
// is loaded once into the compute type (f32 for f16/bf16/f32, f64 for f64),
// updated with torch.optim's single-tensor order of operations and stored
// once, so f16/bf16 parameters and their state are updated in f32 and
// rounded once per step. Nothing is contracted into fused multiply-adds: on
// the CPU none is emitted, and foreach.cu is compiled with -fmad=false
// (src/CMakeLists.txt), so an f32 or f64 step rounds operation for operation
// like torch's CPU step (the golden tests in tests/optim hold it to 1e-6 and
// 1e-12) on both backends, and the GPU's step should equal the CPU's bit for
// bit (sqrt and division are correctly rounded on both) except where AdamW's
// bias corrections come from device step counts (the device's pow). The
// first GPU run, before -fmad=false, saw one-rounding differences; the
// op-consistency test is to confirm the fix on the next one. Reductions
// accumulate in f64.
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
#include "ddp/optim/multi_tensor.h"
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

// update_scale_ (ddp/optim/multi_tensor.h) with the kernels' own rule type,
// as the kernels take it.
void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                   const kernels::ScaleUpdate& u);

}  // namespace ddp::optim::multi_tensor
