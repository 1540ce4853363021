#pragma once
// Launchers of the multi-tensor ("foreach") kernels (kernels/cuda/foreach.cu),
// the CUDA twins of kernels/cpu/foreach.h under the same contract (checked,
// contiguous lists; the step launchers get one floating dtype, the others
// any mix). Each queues its work on `stream` and checks its launches; one
// launch covers as many tensors as one kernel-argument block holds (Note
// [Multi-tensor launches]). The caller has made the tensors' device current.

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/foreach_math.h"
#include "ddp/tensor/tensor.h"

namespace ddp::cuda_kernels {

void foreach_sgd(const Tensors& params, const Tensors& grads, const Tensors& bufs,
                 const std::vector<uint8_t>& fresh, const kernels::SgdScalars& s,
                 cudaStream_t stream);
void foreach_adamw(const Tensors& params, const Tensors& grads, const Tensors& exp_avgs,
                   const Tensors& exp_avg_sqs, const Tensors& max_exp_avg_sqs,
                   const std::vector<kernels::AdamWTensorScalars>& per_tensor,
                   const kernels::AdamWScalars& s, cudaStream_t stream);
// out: an f64 [] tensor on the device, set to Σ |x|^p (or max |x| for p = inf).
void foreach_norm(const Tensors& xs, double p, const Tensor& out, cudaStream_t stream);
// Multiplies every element by factor; where found_inf (an f32 [] tensor on the
// device, or undefined) is given, sets it to 1 if any element was inf or NaN
// (it is never reset to 0 here).
void foreach_mul_(const Tensors& xs, double factor, const Tensor& found_inf, cudaStream_t stream);

}  // namespace ddp::cuda_kernels
