// See src/nn/functional/dense_cuda.h.

#include "cuda/nn_launchers.h"
#include "ddp/tensor/cuda.h"
#include "nn/functional/dense_cuda.h"
#include "tensor/cuda_allocator.h"

namespace ddp::nn::functional::dense_cuda {

namespace {

// The device of `t` made current for a call, and its current stream.
struct OnDevice {
  CudaDeviceGuard guard;
  cudaStream_t stream;
  explicit OnDevice(const Tensor& t)
      : guard(t.device().index),
        stream(static_cast<cudaStream_t>(cuda::current_stream(t.device().index).handle())) {}
};

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  OnDevice on(x);
  cuda_kernels::layer_norm_forward(x, weight, bias, eps, y, mean, rstd, on.stream);
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                         const Tensor& dweight, const Tensor& dbias) {
  OnDevice on(x);
  cuda_kernels::layer_norm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias, on.stream);
}

void gelu_erf(const Tensor& x, const Tensor& y) {
  OnDevice on(x);
  cuda_kernels::gelu_erf(x, y, on.stream);
}

void gelu_erf_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  OnDevice on(x);
  cuda_kernels::gelu_erf_backward(x, dy, dx, on.stream);
}

}  // namespace ddp::nn::functional::dense_cuda
