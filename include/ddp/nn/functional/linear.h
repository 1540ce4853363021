#pragma once
// y = x · weightᵀ + bias, like torch.nn.functional.linear, for x of any
// leading shape [..., in], weight [out, in], bias [out] or undefined; and
// linear_gelu, the same followed by the tanh-approximated GELU in one op.
//
// CPU: x is viewed as a [rows, in] matrix, multiplied by weightᵀ with the
// matmul op and the bias is added (then gelu(·, "tanh") for linear_gelu);
// autograd derives the backward from those ops (dX = dY·W, dW = dYᵀ·X,
// db = Σ_rows dY). CUDA: one cuBLASLt call with a fused epilogue (bias, or
// bias + GELU saving the pre-activation), whose backward computes dW and db
// in one GEMM (Note [cuBLASLt linear] in kernels/cuda/linear_cuda.cpp);
// cases cuBLASLt declines take the CPU's composition on the GPU. And
// linear_gelu_linear, the GPT MLP's two layers as one op.

#include <cstdint>

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

// ShapeError when x's last dim differs from weight's in-features, DTypeError
// for non-floating or mixed dtypes, DeviceError for mixed devices.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// gelu(linear(x, weight, bias), "tanh"), with the same checks and errors
// (naming "linear_gelu"). Autocast treats it as linear (lower precision);
// see Note [linear_gelu] in src/nn/functional/linear.cpp.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// linear(linear_gelu(x, w1, b1), w2, b2) as one op: the GPT MLP without
// its dropout. CUDA fuses the GELU's derivative and db1 into the backward
// GEMM dz·w2 (Note [linear_gelu_linear] in src/nn/functional/linear.cpp);
// the CPU is the composition. linear_gelu's errors (naming
// "linear_gelu_linear"), plus ShapeError when w2 is not [out, w1's out] or
// b2 not [out]. Autocast treats it as linear.
Tensor linear_gelu_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                          const Tensor& b2 = {});

// How often the CUDA linear kernels found their cuBLASLt plan (descriptors
// and algorithm) already made: process-wide counts for tests and tuning;
// entries is the cache's current size. All zero on a device without a plan
// cache (the CPU).
struct LinearCacheStats {
  int64_t entries = 0, hits = 0, misses = 0;
};
LinearCacheStats linear_cache_stats(DeviceType device);

}  // namespace ddp::nn::functional
