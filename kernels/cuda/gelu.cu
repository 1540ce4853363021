// The exact GELU on CUDA; formulas of kernels/cpu/gelu.cpp:
//   y = ½·x·(1 + erf(x/√2)),   dy/dx = Φ(x) + x·exp(-x²/2)/√(2π).

#include "cuda/common.cuh"
#include "cuda/nn_launchers.h"

namespace ddp::cuda_kernels {

static __device__ __forceinline__ float dev_erf(float x) { return erff(x); }
static __device__ __forceinline__ double dev_erf(double x) { return ::erf(x); }
static __device__ __forceinline__ float dev_exp(float x) { return expf(x); }
static __device__ __forceinline__ double dev_exp(double x) { return ::exp(x); }

template <class T>
static __global__ void gelu_kernel(const T* x, T* y, int64_t n) {
  using C = compute_t<T>;
  DDP_KERNEL_LOOP(i, n) {
    const C v = load(x[i]);
    y[i] = store<T>(C(0.5) * v * (C(1) + dev_erf(v * C(0.70710678118654752440))));
  }
}

template <class T>
static __global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, int64_t n) {
  using C = compute_t<T>;
  DDP_KERNEL_LOOP(i, n) {
    const C v = load(x[i]);
    const C cdf = C(0.5) * (C(1) + dev_erf(v * C(0.70710678118654752440)));
    const C pdf = dev_exp(C(-0.5) * v * v) * C(0.39894228040143267794);
    dx[i] = store<T>(load(dy[i]) * (cdf + v * pdf));
  }
}

void gelu_erf(const Tensor& x, const Tensor& y, cudaStream_t stream) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_floating(x.dtype(), "gelu", [&]<class T>() {
    gelu_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(ptr<const T>(x), ptr<T>(y), n);
    DDP_CUDA_CHECK_LAUNCH("gelu_kernel");
  });
}

void gelu_erf_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, cudaStream_t stream) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_floating(x.dtype(), "gelu_backward", [&]<class T>() {
    gelu_backward_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(ptr<const T>(x), ptr<const T>(dy), ptr<T>(dx), n);
    DDP_CUDA_CHECK_LAUNCH("gelu_backward_kernel");
  });
}

}  // namespace ddp::cuda_kernels
