// gather and scatter_add along one dim on CUDA. Like the CPU kernels (Note
// [Indexing through a zero stride] in kernels/cpu/index.cpp), both walk
// index's shape; the indexed tensor joins the Indexer with its stride along
// `dim` set to 0, and the kernel adds index_value * stride(dim).
// scatter_add accumulates duplicates with atomics, so the order of the adds
// (and, for floats, the rounding of the result) can vary from run to run.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common.cuh"
#include "cuda/launchers.h"

namespace ddp::cuda_kernels {

__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int64_t* p, int64_t v) {
  // Two's complement: an unsigned add wraps to the same bits.
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}
__device__ __forceinline__ void atomic_add(Half* p, Half v) {
  __half_raw raw;
  raw.x = v.bits;
  atomicAdd(reinterpret_cast<__half*>(p), __half(raw));
}
__device__ __forceinline__ void atomic_add(BFloat16* p, BFloat16 v) {
  __nv_bfloat16_raw raw;
  raw.x = v.bits;
  atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __nv_bfloat16(raw));
}
// No byte atomics: compare-and-swap the aligned 32-bit word holding the byte.
__device__ __forceinline__ void atomic_add(uint8_t* p, uint8_t v) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  unsigned int* word = reinterpret_cast<unsigned int*>(addr & ~uintptr_t(3));
  const unsigned shift = unsigned(addr & 3) * 8;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    const unsigned byte = ((assumed >> shift) + v) & 0xffu;
    old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (byte << shift));
  } while (old != assumed);
}

// Operands of the Indexer: 0 index, 1 out (gather) / src (scatter_add),
// 2 the indexed tensor with stride 0 along dim.
template <class T, class I>
static __global__ void gather_kernel(const T* in, const I* index, T* out, int64_t dim_stride,
                                     Indexer<3> ix, int64_t n) {
  DDP_KERNEL_LOOP(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    out[off[1]] = in[off[2] + int64_t(index[off[0]]) * dim_stride];
  }
}

template <class T, class I>
static __global__ void scatter_add_kernel(T* out, const I* index, const T* src, int64_t dim_stride,
                                          Indexer<3> ix, int64_t n) {
  DDP_KERNEL_LOOP(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    atomic_add(out + off[2] + int64_t(index[off[0]]) * dim_stride, src[off[1]]);
  }
}

// A 0-dim tensor has no stride to index (its index must then be 0).
static Shape without_dim(const Tensor& t, int64_t dim) {
  Shape s = t.strides();
  if (!s.empty()) s[size_t(dim)] = 0;
  return s;
}
static int64_t stride_of(const Tensor& t, int64_t dim) {
  return t.strides().empty() ? 0 : t.strides()[size_t(dim)];
}
static int64_t wrap(int64_t dim, const Tensor& t) {
  return dim < 0 ? dim + int64_t(t.shape().size()) : dim;
}

void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out,
            cuda::Stream stream) {
  const int64_t n = index.numel();
  if (n == 0) return;
  dim = wrap(dim, in);
  const Shape in_strides = without_dim(in, dim);
  const Indexer<3> ix =
      make_indexer<3>(index.shape(), {&index.strides(), &out.strides(), &in_strides});
  const int64_t dim_stride = stride_of(in, dim);
  dispatch_all(out.dtype(), "gather", [&]<class T>() {
    dispatch_index(index.dtype(), "gather", [&]<class I>() {
      gather_kernel<T, I><<<grid_for(n), kThreads, 0, native(stream)>>>(
          ptr<const T>(in), ptr<const I>(index), ptr<T>(out), dim_stride, ix, n);
      DDP_CUDA_CHECK_LAUNCH("gather_kernel");
    });
  });
}

void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src,
                 cuda::Stream stream) {
  const int64_t n = index.numel();
  if (n == 0) return;
  dim = wrap(dim, out);
  const Shape out_strides = without_dim(out, dim);
  const Indexer<3> ix =
      make_indexer<3>(index.shape(), {&index.strides(), &src.strides(), &out_strides});
  const int64_t dim_stride = stride_of(out, dim);
  dispatch_numeric(out.dtype(), "scatter_add", [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {  // dispatch_numeric throws for bool
      dispatch_index(index.dtype(), "scatter_add", [&]<class I>() {
        scatter_add_kernel<T, I><<<grid_for(n), kThreads, 0, native(stream)>>>(
            ptr<T>(out), ptr<const I>(index), ptr<const T>(src), dim_stride, ix, n);
        DDP_CUDA_CHECK_LAUNCH("scatter_add_kernel");
      });
    }
  });
}

}  // namespace ddp::cuda_kernels
