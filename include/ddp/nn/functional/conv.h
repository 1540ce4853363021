#pragma once
// 2-D convolution, like torch.nn.functional.conv2d:
//
//   y[n, o, i, j] = b[o] + Σ_{c in o's group, p, q}
//                   w[o, c, p, q] · x[n, g·C/G + c, i·s_h + p·d_h − pad_h, j·s_w + q·d_w − pad_w]
//
// x [N, C, H, W], w [O, C/groups, KH, KW], b [O] or undefined, zero padding.
// Forward and backward (input, weight, bias) are in src/nn/functional/conv.cpp;
// the kernels are oneDNN on the CPU (kernels/cpu/conv_onednn.cpp) and cuDNN
// on CUDA (kernels/cuda/conv_cuda.cpp). See Note [Conv2d backends] in conv.cpp.
//
// Channels-last tensors: Note [Channels-last tensors] in
// include/ddp/tensor/memory_format.h, where is_channels_last,
// to_channels_last and empty_nchw live (also named here, below).

#include <cstdint>

#include "ddp/nn/functional/int2.h"
#include "ddp/tensor/memory_format.h"
#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

struct Conv2dParams {
  Int2 stride = 1;
  Int2 padding = 0;
  Int2 dilation = 1;
  int64_t groups = 1;
};

// Raises ShapeError (ranks, channels vs groups, an empty output), DTypeError
// (non-floating or mixed dtypes), DeviceError (mixed devices), ValueError
// (non-positive stride/dilation/groups, negative padding). `who` prefixes
// messages (a module's describe()); empty: "conv2d".
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dParams& params = {}, const std::string& who = "");

// relu(conv2d(x, weight, bias, params)), fused into one cuDNN kernel on
// CUDA for inference (Note [Fused conv + bias + ReLU] in
// src/nn/functional/conv.cpp). bias may be undefined (conv + ReLU). When a
// gradient is needed, or on the CPU, or with no fused cuDNN engine for the
// case, it composes conv2d and relu (differentiable). The same argument
// checks and errors as conv2d; `who` empty: "conv2d_bias_relu".
Tensor conv2d_bias_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        const Conv2dParams& params = {}, const std::string& who = "");
// Process-wide count of conv2d_bias_relu calls that composed instead of
// running fused: for tests and profiling.
int64_t conv2d_bias_relu_unfused_count();

// The output's spatial size: (in + 2·pad − dil·(k − 1) − 1) / stride + 1.
int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding,
                         int64_t dilation);

// How often conv2d found its oneDNN primitive (CPU) or cuDNN execution plan
// (CUDA: keyed by pass, geometry, strides, dtype, TF32 switch, determinism
// and device; Note [cuDNN convolution]) already made: for tests and tuning.
// The counts are process-wide; entries is the cache's current size.
// weight_hits / weight_misses (CPU only): passes that found their weight's
// oneDNN-blocked copy current and skipped its reorder, and those that
// reordered it; weight_bytes: the bytes of the copies kept now (Note
// [oneDNN weight cache]: a copy is kept once a weight is used twice without
// a counted write between, docs/tensor.md "The version counter").
struct ConvCacheStats {
  int64_t entries = 0, hits = 0, misses = 0;
  int64_t weight_hits = 0, weight_misses = 0, weight_bytes = 0;
};
ConvCacheStats conv2d_cache_stats(DeviceType device);

// The memory-format helpers of the tensor layer (ddp/tensor/memory_format.h),
// by the names the conv-family layers have always used.
using ::ddp::empty_nchw;
using ::ddp::is_channels_last;
using ::ddp::to_channels_last;

}  // namespace ddp::nn::functional
