#pragma once
// The nn functional ops' way into their CUDA code without CUDA headers:
// each function makes the tensors' device current and queues its work on
// that device's current stream. Implemented by dense_cuda_cuda.cpp (the
// launchers of kernels/cuda/nn_launchers.h) and linear_cuda.cpp (cuBLASLt);
// in a build without CUDA, dense_cuda_nocuda.cpp raises DeviceError
// (unreachable in practice: no CUDA tensor can exist there). Internal to
// src/nn/functional.

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional::dense_cuda {

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                         const Tensor& dweight, const Tensor& dbias);
void gelu_erf(const Tensor& x, const Tensor& y);
void gelu_erf_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);

// y [rows, out] = x [rows, in] · wᵀ (+ bias [out]) in one cuBLASLt call with
// the bias epilogue (Note [cuBLASLt linear]); all contiguous, one floating
// dtype. Returns false, having written nothing, when cuBLASLt offers no
// algorithm for the case; the caller then composes matmul and add.
bool linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);

}  // namespace ddp::nn::functional::dense_cuda
