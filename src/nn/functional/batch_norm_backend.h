#pragma once
// Internal: the cuDNN path of nn::functional::batch_norm (training mode,
// batch statistics), in batch_norm_cuda.cpp; see Note [BatchNorm backends].

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional::batch_norm_detail {

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
