#pragma once
// CPU kernels of nn::functional::max_pool2d (src/nn/functional/pooling.cpp):
// x contiguous [P, H, W] (P = N·C planes) of f32 or f64; y and indices
// contiguous [P, OH, OW]; indices (i64) hold each maximum's position h·W + w
// in its plane, like torch's. Padding never wins (it is −∞); a NaN wins, as
// in torch.

#include "ddp/nn/functional/int2.h"
#include "ddp/tensor/tensor.h"

namespace ddp::cpu_kernels {

void max_pool2d(const Tensor& x, nn::Int2 kernel, nn::Int2 stride, nn::Int2 padding,
                nn::Int2 dilation, const Tensor& y, const Tensor& indices);
// dx (contiguous [P, H, W]) = 0, then dx[p, indices[p, i]] += dy[p, i].
void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx);

}  // namespace ddp::cpu_kernels
