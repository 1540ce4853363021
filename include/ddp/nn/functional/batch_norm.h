#pragma once
// Batch normalisation over the channel dim of [N, C, *], like
// torch.nn.functional.batch_norm:
//
//   y = (x − mean[c]) / sqrt(var[c] + eps) · weight[c] + bias[c]
//
// With use_batch_stats, mean and var are the batch's (biased var), and the
// running statistics, when given, are updated in place:
//   running_mean = (1 − momentum)·running_mean + momentum·mean
//   running_var  = (1 − momentum)·running_var  + momentum·var·n/(n − 1)
// (the unbiased variance, n = N·H·W, as torch does). Otherwise the running
// statistics are used and not changed. weight/bias may be undefined (1 / 0).
// Backward covers both modes (x, weight, bias).
//
// Note [BatchNorm backends]
// CPU: the kernels in kernels/cpu/batch_norm.cpp (f32, f64; f16/bf16 are
// computed in f32), with the backward formula written out (batch_norm.h).
// CUDA, training (batch statistics, 4-D input): cuDNN's
// cudnnBatchNormalizationForwardTraining and Backward (batch_norm_cuda.cpp),
// NCHW or NHWC. CUDA otherwise (eval, other ranks, builds without cuDNN):
// composed from ddp's tensor ops (mean, var, rsqrt, broadcasting
// arithmetic), so autograd derives the backward; in eval this is just a
// per-channel affine map, for which cuDNN would add nothing.

#include <string>

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

// ShapeError for a rank below 2 or per-channel tensors that are not [C];
// ValueError when use_batch_stats and a channel has one value only.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool use_batch_stats,
                  double momentum = 0.1, double eps = 1e-5, const std::string& who = "");

}  // namespace ddp::nn::functional
