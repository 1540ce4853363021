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
// computed in f32), with the backward formula written out, NCHW or NHWC
// without a layout copy.
// CUDA with cuDNN: cuDNN's graph API (batch_norm_cuda.cpp, Note [cuDNN batch
// norm graphs] there): the frontend's batchnorm node for training (batch
// statistics and the running-statistics update in one graph),
// batchnorm_inference for evaluation, batchnorm_backward, and the fused
// apply + add + ReLU. Cases no cuDNN engine takes (f64, some shapes and
// cuDNN versions) run cuDNN's legacy cudnnBatchNormalization* calls, which
// take them all. CUDA without cuDNN: composed from ddp's tensor ops (mean,
// var, rsqrt, broadcasting arithmetic), so autograd derives the backward.
//
// Note [BatchNorm + add + ReLU fusion]
// A ResNet's blocks end their branches in relu(bn(conv(x))) and
// relu(bn(conv(x)) + identity). batch_norm_add_relu computes the same in
// one op: on the CPU the add and the ReLU happen in the apply sweep (one
// read of x and the residual, one write of y, instead of two more full
// passes), and the backward takes the ReLU's mask from the output (NHWC:
// while it sums the gradient, no separate relu backward pass; NCHW: in a
// pass of its own, see add_relu_backward in the kernel); on CUDA it is one
// cuDNN graph (batchnorm → ADD → RELU_FWD) forward and relu backward +
// batchnorm_backward. The result equals the composed ops': the bn result is
// rounded to x's dtype before the add, the ReLU is relu's (NaN → 0, gradient
// 0 at 0), and dresidual is the masked gradient. Under autocast it follows
// batch_norm's keep_input policy for x, weight and bias, and leaves the
// residual as it is (the composed add does not cast either); a residual of
// another dtype than x's is composed, so the add promotes as it would.
// set_batch_norm_fusion_enabled(false) makes nn::BatchNorm2d::
// forward_add_relu compose the ops instead (for comparisons; both give the
// same values).

#include <string>

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

// ShapeError for a rank below 2 or per-channel tensors that are not [C];
// ValueError when use_batch_stats and a channel has one value only.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool use_batch_stats,
                  double momentum = 0.1, double eps = 1e-5, const std::string& who = "");

// relu(batch_norm(x, ...) + residual), fused (Note [BatchNorm + add + ReLU
// fusion]); residual undefined gives relu(batch_norm(x, ...)). Differentiable
// in x, weight, bias and residual. batch_norm's errors, plus ShapeError for a
// residual whose shape is not x's and DeviceError for one on another device.
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                           const Tensor& weight, const Tensor& bias, const Tensor& residual,
                           bool use_batch_stats, double momentum = 0.1, double eps = 1e-5,
                           const std::string& who = "");

// Whether nn::BatchNorm2d::forward_add_relu (so the ResNet blocks) calls
// batch_norm_add_relu (the default) or composes batch_norm, add and relu.
// Process-wide; meant for comparisons and benchmarks. The environment
// variable DDP_BATCH_NORM_FUSION=0 sets it off at startup.
void set_batch_norm_fusion_enabled(bool enabled);
bool batch_norm_fusion_enabled();

}  // namespace ddp::nn::functional
