#pragma once
// 2-D pooling, like torch.nn.functional.max_pool2d and adaptive_avg_pool2d,
// on [N, C, H, W] inputs.
//
// Note [Pooling backends]
// max_pool2d: kernels that record each window's argmax (as torch does) and
// a backward that routes dy to it: kernels/cpu/max_pool2d.cpp and
// kernels/cuda/max_pool2d.cu (f32, f64; f16/bf16 are computed in f32).
// Our own kernels rather than cuDNN's pooling, whose backward recomputes
// the argmax from x and y and whose padding semantics differ from torch's.
// NHWC inputs on the CPU and CUDA go to NHWC kernels (Note [Channels-last
// max_pool2d] in kernels/cpu/max_pool2d.cpp): output, indices and the
// input's gradient stay NHWC with no copy. A device without them runs the
// planar kernel on an NCHW copy and converts back, counted by
// layout_conversion_count().
// adaptive_avg_pool2d: output 1×1 is mean over H and W; the general case
// is two matmuls with averaging matrices, y = A_h · x · A_wᵀ, where row i of
// A_h [OH, H] holds 1/len over torch's window [floor(i·H/OH),
// ceil((i+1)·H/OH)). Both are ordinary differentiable ops, so they run on
// every device and dtype and autograd derives the backward; the cost,
// O(N·C·H·W·(OH + OW)), is small next to the convolutions around them.

#include <string>

#include "ddp/nn/functional/int2.h"
#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

// Windows of `kernel` every `stride` over x padded by `padding` (−∞; at most
// half the kernel, as torch requires), floor mode. ShapeError for a wrong
// rank or an empty output, ValueError for bad arguments.
Tensor max_pool2d(const Tensor& x, Int2 kernel, Int2 stride, Int2 padding = 0, Int2 dilation = 1,
                  const std::string& who = "");

Tensor adaptive_avg_pool2d(const Tensor& x, Int2 output_size, const std::string& who = "");

}  // namespace ddp::nn::functional
