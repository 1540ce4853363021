#pragma once
// CPU kernels of nn::functional::batch_norm (src/nn/functional/batch_norm.cpp):
// x, y, dy, dx are contiguous [N, C, S] (S = H·W) of f32 or f64; per-channel
// vectors are contiguous [C] of the same dtype; weight undefined means 1.
// Sums are accumulated in double.

#include "ddp/tensor/tensor.h"

namespace ddp::cpu_kernels {

// mean[c] and the biased variance var[c] of x over N and S.
void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var);
// y = (x − mean[c]) · invstd[c] · weight[c] + bias[c].
void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& y);
// Gradients of batch_norm_apply. With batch statistics (training), mean and
// invstd depend on x, which adds the two mean terms of the usual formula:
//   dx = w·invstd·(dy − mean(dy) − x̂·mean(dy·x̂))   (training)
//   dx = w·invstd·dy                                (eval)
// dweight = Σ dy·x̂, dbias = Σ dy. Undefined outputs are skipped.
void batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, bool batch_stats,
                         const Tensor& dx, const Tensor& dweight, const Tensor& dbias);

}  // namespace ddp::cpu_kernels
