#pragma once
// CUDA launchers of the nn layers' own kernels (the tensor ops' launchers
// are in launchers.h); their CPU twins and contracts are in
// kernels/cpu/nn_kernels.h. Each queues its work on `stream` and checks the
// launch; the caller has made the tensors' device current.

#include <cuda_runtime.h>

#include "ddp/tensor/tensor.h"

namespace ddp::cuda_kernels {

// layer_norm.cu
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd,
                        cudaStream_t stream);
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                         const Tensor& dweight, const Tensor& dbias, cudaStream_t stream);

// gelu.cu
void gelu_erf(const Tensor& x, const Tensor& y, cudaStream_t stream);
void gelu_erf_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, cudaStream_t stream);

}  // namespace ddp::cuda_kernels
