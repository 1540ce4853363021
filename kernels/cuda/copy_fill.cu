// copy (strided, with a cast between any two dtypes), fill and arange on CUDA.
// See Note [CUDA elementwise paths] in elementwise.cuh.

#include "cuda/common.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/launchers.h"

namespace ddp::cuda_kernels {

template <class S, class D>
struct CastElement {
  __device__ __forceinline__ D operator()(S v) const { return cast_to<D>(v); }
};

template <class T>
struct FillElement {
  T value;
  __device__ __forceinline__ T operator()() const { return value; }
};

// Like the CPU kernel: each element from its index, in double, rounded once.
// The explicit _rn intrinsics keep nvcc from fusing into an FMA, so the
// result is bit-identical to the host's.
template <class T>
static __global__ void arange_kernel(T* out, double start, double step, int64_t n) {
  DDP_KERNEL_LOOP(i, n) { out[i] = cast_to<T>(__dadd_rn(start, __dmul_rn(double(i), step))); }
}

void copy(const Tensor& src, const Tensor& dst, cuda::Stream stream) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    if (src.data_ptr() != dst.data_ptr())
      DDP_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                     cudaMemcpyDeviceToDevice, native(stream)));
    return;
  }
  dispatch_all(src.dtype(), "copy", [&]<class S>() {
    dispatch_all(dst.dtype(), "copy", [&]<class D>() {
      launch_elementwise<D, S>("copy_kernel", CastElement<S, D>{}, stream, dst, {&src});
    });
  });
}

void fill(const Tensor& out, double value, cuda::Stream stream) {
  if (out.numel() == 0) return;
  dispatch_all(out.dtype(), "fill", [&]<class T>() {
    launch_elementwise<T>("fill_kernel", FillElement<T>{cast_to<T>(value)}, stream, out, {});
  });
}

void arange(const Tensor& out, double start, double step, cuda::Stream stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_numeric(out.dtype(), "arange", [&]<class T>() {
    arange_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(ptr<T>(out), start, step, n);
    DDP_CUDA_CHECK_LAUNCH("arange_kernel");
  });
}

}  // namespace ddp::cuda_kernels
