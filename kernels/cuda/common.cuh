#pragma once
// Shared by the CUDA kernel files (kernels/cuda/*.cu): launch geometry, the
// strided offset helper, and scalar casts that match the CPU kernels.
//
// Note [CUDA strided operands]
// A kernel over N operands that share one shape gets an Indexer<N> by value:
// the shape with size-1 dims dropped and neighbouring dims merged where every
// operand walks them as one (stride[d] == stride[d+1] * size[d+1]), plus each
// operand's strides. All-contiguous operands become one dim with unit
// strides, so offsets() does no division. Kernels are grid-stride loops over
// the linear element index i in row-major order of the shape. Elementwise
// kernels choose between this 64-bit Indexer, its 32-bit twin and a flat
// vectorised loop (Note [CUDA elementwise paths] in elementwise.cuh).

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "cuda/on_device.h"
#include "common/scalar_cast.h"
#include "ddp/core/dispatch.h"
#include "ddp/core/dtype.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/tensor.h"

namespace ddp::cuda_kernels {

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items (at least 1, at most 65536).
inline unsigned grid_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(std::clamp<int64_t>(blocks, 1, 65536));
}

template <int N>
struct Indexer {
  using index_t = int64_t;
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];

  // Element offsets of linear index i (row-major over the shape) per operand.
  __device__ __forceinline__ void offsets(int64_t i, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 1; --d) {
      int64_t q = i / sizes[d];
      int64_t r = i - q * sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += r * strides[k][d];
      i = q;
    }
    if (ndim > 0) {
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][0];
    }
  }
};

// Builds an Indexer over `shape` with one stride vector per operand. See
// Note [CUDA strided operands].
template <int N>
Indexer<N> make_indexer(const Shape& shape, const std::array<const Shape*, N>& strides) {
  DDP_CHECK(shape.size() <= size_t(kMaxDims), "cuda kernel: {} dims exceed kMaxDims={}",
            shape.size(), kMaxDims);
  // Drop size-1 dims, keeping the order outer -> inner.
  int64_t size[kMaxDims];
  int64_t st[N][kMaxDims];
  int nd = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    size[nd] = shape[d];
    for (int k = 0; k < N; ++k) st[k][nd] = (*strides[k])[d];
    ++nd;
  }
  // Merge from the inner end; merged dims are collected innermost first.
  Indexer<N> ix;
  int64_t msize[kMaxDims];
  int64_t mst[N][kMaxDims];
  int m = 0;
  for (int d = nd - 1; d >= 0; --d) {
    if (m > 0) {
      bool ok = true;
      for (int k = 0; k < N; ++k) ok = ok && st[k][d] == mst[k][m - 1] * msize[m - 1];
      if (ok) {
        msize[m - 1] *= size[d];
        continue;
      }
    }
    msize[m] = size[d];
    for (int k = 0; k < N; ++k) mst[k][m] = st[k][d];
    ++m;
  }
  ix.ndim = m;
  for (int d = 0; d < kMaxDims; ++d) {
    ix.sizes[d] = d < m ? msize[m - 1 - d] : 1;
    for (int k = 0; k < N; ++k) ix.strides[k][d] = d < m ? mst[k][m - 1 - d] : 0;
  }
  return ix;
}

// Indexer over tensors that share one shape (the first one's).
template <class... Ts>
Indexer<1 + int(sizeof...(Ts))> make_indexer(const Tensor& first, const Ts&... rest) {
  return make_indexer<1 + int(sizeof...(Ts))>(first.shape(),
                                              {&first.strides(), &rest.strides()...});
}

template <class T>
inline T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// ---- scalar casts: Note [Scalar casts] in kernels/common/scalar_cast.h,
// shared with the CPU kernels so the two backends agree bit for bit.
using kernels::cast_to;
using kernels::float_to_i64;
using kernels::is_half_like;
using kernels::load;
using kernels::store;

// Reduces one value per thread across a power-of-two block (blockDim.x, with
// `sm` holding blockDim.x values); every thread gets the result. Ends with a
// barrier so `sm` may be reused at once. Used by the row reductions and softmax.
template <class V, class Combine>
__device__ __forceinline__ V block_all_reduce(V v, V* sm, Combine combine) {
  const unsigned tid = threadIdx.x;
  sm[tid] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) sm[tid] = combine(sm[tid], sm[tid + s]);
    __syncthreads();
  }
  v = sm[0];
  __syncthreads();
  return v;
}

// Accumulation type of reductions: float for f16/bf16/f32, double for f64, int64 otherwise.
template <class T>
using acc_t = compute_t<T>;

}  // namespace ddp::cuda_kernels

// Grid-stride loop over [0, n) with a 64-bit index.
#define DDP_KERNEL_LOOP(i, n)                                               \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)
