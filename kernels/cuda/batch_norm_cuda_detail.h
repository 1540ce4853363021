#pragma once
// Internal to the CUDA batch_norm kernels: the legacy cuDNN calls
// (batch_norm_legacy_cuda.cpp) that the graph-API kernels
// (batch_norm_cuda.cpp) fall back to, and helpers both use. Built only with
// cuDNN. The kernels' contracts are kernels/kernel_list.h's batch_norm ones.

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional::batch_norm_cuda {

// t in dtype dt, contiguous; or `fill` of shape [c] when t is undefined.
Tensor param(const Tensor& t, DType dt, int64_t c, double fill, Device device);
// cuDNN's per-channel dtype: f64 for f64 data, else f32 (Note [cuDNN batch
// norm dtypes] in batch_norm_legacy_cuda.cpp).
DType param_dtype(DType data);
// A 4-D view cuDNN can describe: 4-D tensors as they are (NCHW or NHWC
// strides), others (contiguous) as [N, C, S, 1].
Tensor as_4d(const Tensor& t);

// kernels::batch_norm_train_forward / _eval_forward / _backward through
// cudnnBatchNormalization*.
void legacy_train_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const Tensor& running_mean, const Tensor& running_var, double momentum,
                          double eps, const Tensor& y, const Tensor& save_mean,
                          const Tensor& save_invstd);
void legacy_eval_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Tensor& running_mean, const Tensor& running_var, double eps,
                         const Tensor& y);
void legacy_backward(const Tensor& x, const Tensor& dy, const Tensor& weight,
                     const Tensor& save_mean, const Tensor& save_invstd, bool batch_stats,
                     double eps, const Tensor& dx, const Tensor& dweight, const Tensor& dbias);
// Evaluation-mode gradients (the statistics are constants): cuDNN has no
// call for them, and they are three per-channel tensor expressions.
void eval_backward(const Tensor& x, const Tensor& dy, const Tensor& weight, const Tensor& mean,
                   const Tensor& invstd, const Tensor& dx, const Tensor& dweight,
                   const Tensor& dbias);

}  // namespace ddp::nn::functional::batch_norm_cuda
