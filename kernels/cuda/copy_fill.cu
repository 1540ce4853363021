// copy (strided, with a cast between any two dtypes), fill and arange on CUDA.
// See Note [CUDA strided operands] in common.cuh.

#include "cuda/common.cuh"
#include "cuda/launchers.h"

namespace ddp::cuda_kernels {

template <class S, class D>
static __global__ void copy_kernel(const S* src, D* dst, Indexer<2> ix, int64_t n) {
  DDP_KERNEL_LOOP(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    dst[off[1]] = cast_to<D>(src[off[0]]);
  }
}

template <class T>
static __global__ void fill_kernel(T* out, T value, Indexer<1> ix, int64_t n) {
  DDP_KERNEL_LOOP(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    out[off[0]] = value;
  }
}

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
  const Indexer<2> ix = make_indexer(src, dst);
  dispatch_all(src.dtype(), "copy", [&]<class S>() {
    dispatch_all(dst.dtype(), "copy", [&]<class D>() {
      copy_kernel<S, D>
          <<<grid_for(n), kThreads, 0, native(stream)>>>(ptr<const S>(src), ptr<D>(dst), ix, n);
      DDP_CUDA_CHECK_LAUNCH("copy_kernel");
    });
  });
}

void fill(const Tensor& out, double value, cuda::Stream stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const Indexer<1> ix = make_indexer(out);
  dispatch_all(out.dtype(), "fill", [&]<class T>() {
    fill_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(ptr<T>(out), cast_to<T>(value), ix, n);
    DDP_CUDA_CHECK_LAUNCH("fill_kernel");
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
