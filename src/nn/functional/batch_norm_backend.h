#pragma once
// Internal: the cuDNN path of nn::functional::batch_norm (training mode,
// batch statistics), in batch_norm_cuda.cpp (see Note [BatchNorm
// backends]), and the pieces batch_norm.cpp shares with SyncBatchNorm
// (src/parallel/sync_batch_norm.cpp).

#include <string>

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional::batch_norm_detail {

// x defined, [N, C, ...] and floating; each defined per-channel tensor [C]
// on x's device. Errors are prefixed by `who`.
void check_args(const std::string& who, const Tensor& x, const Tensors& per_channel);
// Per-channel statistics in place, unrecorded: running = (1 − m)·running + m·value.
void update_running(const Tensor& running, const Tensor& value, double momentum);
// [C] viewed as [1, C, 1, ...] to broadcast against an input of this rank.
Tensor per_channel(const Tensor& t, int64_t rank);

// False in builds without cuDNN (batch_norm then composes tensor ops on CUDA).
bool have_cudnn();
// x: 4-D CUDA tensor (NCHW or NHWC strides); per-channel tensors [C] or
// undefined. Normalises with batch statistics, updates the running ones in
// place (cuDNN's update uses the unbiased variance, as torch does) and
// records the backward (cudnnBatchNormalizationBackward).
Tensor batch_norm_train_cudnn(const Tensor& x, const Tensor& running_mean,
                              const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                              double momentum, double eps);

}  // namespace ddp::nn::functional::batch_norm_detail
