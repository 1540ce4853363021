#pragma once
// CUDA launchers of nn::functional::max_pool2d: the twins of
// kernels/cpu/max_pool2d.h, with the same contract (contiguous [P, H, W]
// planes, f32 or f64, i64 argmax indices h·W + w). Each queues its work on
// `stream` and checks the launch; the caller has made the device current.

#include <cuda_runtime.h>

#include "ddp/nn/functional/int2.h"
#include "ddp/tensor/tensor.h"

namespace ddp::cuda_kernels {

void max_pool2d(const Tensor& x, nn::Int2 kernel, nn::Int2 stride, nn::Int2 padding,
                nn::Int2 dilation, const Tensor& y, const Tensor& indices, cudaStream_t stream);
// dx = 0, then dx[p, indices[p, i]] += dy[p, i] (atomically: windows overlap).
void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                         cudaStream_t stream);

}  // namespace ddp::cuda_kernels
