#pragma once
// CPU kernels of the multi-tensor ("foreach") ops of src/optim/foreach.h,
// with the element arithmetic of kernels/common/foreach_math.h. The caller
// (src/optim/foreach.cpp) has checked the lists: entry k of every list has
// the shape, dtype and device of params[k], all are contiguous, and the
// step kernels get lists of one floating dtype. An empty optional list
// (momentum buffers without momentum, max_exp_avg_sqs without amsgrad) is
// passed as an empty Tensors.

#include <cstdint>
#include <vector>

#include "common/foreach_math.h"
#include "ddp/tensor/tensor.h"

namespace ddp::cpu {

// fresh[k] != 0: bufs[k] is new and starts as the gradient.
void foreach_sgd(const Tensors& params, const Tensors& grads, const Tensors& bufs,
                 const std::vector<uint8_t>& fresh, const kernels::SgdScalars& s);
void foreach_adamw(const Tensors& params, const Tensors& grads, const Tensors& exp_avgs,
                   const Tensors& exp_avg_sqs, const Tensors& max_exp_avg_sqs,
                   const std::vector<kernels::AdamWTensorScalars>& per_tensor,
                   const kernels::AdamWScalars& s);
// Σ |x|^p over every element of every tensor, or max |x| for p = inf (NaN
// when any element is NaN), in f64; tensors of any floating dtypes.
double foreach_norm(const Tensors& xs, double p);
// Multiplies every element by factor (in the compute type); returns whether
// any element was inf or NaN before the multiplication.
bool foreach_mul_(const Tensors& xs, double factor);

}  // namespace ddp::cpu
