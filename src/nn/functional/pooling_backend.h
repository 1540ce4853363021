#pragma once
// Internal: max_pool2d's CUDA kernels behind a CUDA-free interface, so
// pooling.cpp compiles without CUDA (pooling_cuda.cpp; pooling_nocuda.cpp
// raises DeviceError). Same contract as kernels/cpu/max_pool2d.h.

#include "ddp/nn/functional/int2.h"
#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional::pooling_detail {

void max_pool2d_cuda(const Tensor& x, Int2 kernel, Int2 stride, Int2 padding, Int2 dilation,
                     const Tensor& y, const Tensor& indices);
void max_pool2d_backward_cuda(const Tensor& dy, const Tensor& indices, const Tensor& dx);

}  // namespace ddp::nn::functional::pooling_detail
