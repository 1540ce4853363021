#pragma once
// The one launcher behind every elementwise CUDA kernel (unary, binary,
// compare, where, copy, fill): launch_elementwise picks the fastest of three
// index paths for the operands at hand. See Note [CUDA elementwise paths].
//
// Note [CUDA elementwise paths]
// An elementwise kernel is memory bound, so what counts is how many bytes
// each element moves and how much integer work finding it costs.
//  1. Flat: every operand is dense (no gaps, no overlap) and all share the
//     output's strides: contiguous tensors, channels-last tensors, any one
//     dense permutation. Then element i of the storage is element i of every
//     operand, the kernel walks storage order with no index math at all, and,
//     when every pointer is aligned, it moves 16 bytes per operand per load
//     or store (Vec below; 4 floats, 8 halves), with a scalar loop for the
//     tail that is not a whole vector. An unaligned operand (a view at an odd
//     offset) takes the same flat loop one element at a time.
//  2. Strided, 32-bit: broadcasting (stride 0), transposes and other views.
//     Offsets come from dividing the linear index by each merged dim's size
//     (Note [CUDA strided operands]); when the element count and every
//     operand's largest offset fit in int32, the divisions use IntDivider32
//     (Note [Fast index division]): a multiply-high and a shift per dim.
//  3. Strided, 64-bit: the same with int64 division, for the rare tensors
//     whose offsets do not fit in 32 bits.
// All three are grid-stride loops, so a grid capped at 65536 blocks covers
// any size. The functor F maps the input elements (storage types) to the
// output element and is the same on every path, so the paths cannot differ
// in what they compute.

#include <algorithm>
#include <cstddef>
#include <tuple>
#include <utility>

#include "common/int_divider.h"
#include "cuda/common.cuh"

namespace ddp::cuda_kernels {

using kernels::IntDivider32;

// VEC elements of T moved as one aligned load or store.
template <int VEC, class T>
struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

// Elements per vector: 16 bytes of the widest operand.
template <class... Ts>
inline constexpr int kVecWidth = int(16 / std::max({sizeof(Ts)...}));

// The 32-bit twin of Indexer (common.cuh): dims 1.. divide by IntDivider32.
template <int N>
struct Indexer32 {
  using index_t = uint32_t;
  int ndim = 0;
  IntDivider32 sizes[kMaxDims];
  uint32_t strides[N][kMaxDims];

  __device__ __forceinline__ void offsets(uint32_t i, uint32_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    // Unrolled over kMaxDims with constant indices, so the dividers and
    // strides are read from the parameter bank instead of a local copy.
#pragma unroll
    for (int d = kMaxDims - 1; d >= 1; --d) {
      if (d < ndim) {
        uint32_t q, r;
        sizes[d].divmod(i, q, r);
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += r * strides[k][d];
        i = q;
      }
    }
    if (ndim > 0) {
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][0];
    }
  }
};

// Does ix (merged, Note [CUDA strided operands]) address n elements and every
// operand's last element with offsets below 2^31? Negative strides never
// occur (views only narrow, permute, expand and slice with positive steps).
template <int N>
bool fits_in_32_bits(const Indexer<N>& ix, int64_t n) {
  constexpr int64_t kMax = INT32_MAX;
  if (n > kMax) return false;
  for (int k = 0; k < N; ++k) {
    int64_t last = 0;
    for (int d = 0; d < ix.ndim; ++d) {
      if (ix.strides[k][d] < 0) return false;
      last += (ix.sizes[d] - 1) * ix.strides[k][d];
      if (last > kMax) return false;
    }
  }
  return true;
}

template <int N>
Indexer32<N> to_32_bits(const Indexer<N>& ix) {
  Indexer32<N> out;
  out.ndim = ix.ndim;
  for (int d = 0; d < kMaxDims; ++d) {
    out.sizes[d] = IntDivider32(uint32_t(ix.sizes[d]));
    for (int k = 0; k < N; ++k) out.strides[k][d] = uint32_t(ix.strides[k][d]);
  }
  return out;
}

// Is a tensor of this shape and these strides dense: its elements fill
// exactly numel consecutive slots, in some order of the dims? Then its
// data pointer is the lowest of them.
inline bool is_dense(const Shape& shape, const Shape& strides) {
  std::array<std::pair<int64_t, int64_t>, kMaxDims> dims{};  // (stride, size), size > 1
  size_t m = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) dims[m++] = {strides[d], shape[d]};
  std::sort(dims.begin(), dims.begin() + m);
  int64_t expected = 1;
  for (size_t d = 0; d < m; ++d) {
    if (dims[d].first != expected) return false;
    expected *= dims[d].second;
  }
  return true;
}

template <size_t M>
bool share_dense_layout(const Tensor& out, const std::array<const Tensor*, M>& ins) {
  if (!is_dense(out.shape(), out.strides())) return false;
  for (const Tensor* t : ins) {
    if (t->shape() != out.shape()) return false;
    // Strides of size-1 dims are never used; compare the others.
    for (size_t d = 0; d < out.shape().size(); ++d)
      if (out.shape()[d] != 1 && t->strides()[d] != out.strides()[d]) return false;
  }
  return true;
}

template <int VEC, class F, class Out, class... In>
__device__ __forceinline__ void apply_vec(const F& f, Out* out, const Vec<VEC, In>&... x) {
  Vec<VEC, Out> o;
#pragma unroll
  for (int k = 0; k < VEC; ++k) o.v[k] = f(x.v[k]...);
  *reinterpret_cast<Vec<VEC, Out>*>(out) = o;
}

// Path 1 of Note [CUDA elementwise paths], every pointer aligned to a Vec.
// (Unaligned dense operands run strided_kernel over one unit-stride dim,
// which does no division either.)
template <int VEC, class F, class Out, class... In>
static __global__ void flat_vec_kernel(F f, int64_t n, Out* out, const In*... in) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / VEC;
  for (int64_t v = first; v < nvec; v += step)
    apply_vec<VEC>(f, out + v * VEC, *reinterpret_cast<const Vec<VEC, In>*>(in + v * VEC)...);
  for (int64_t i = nvec * VEC + first; i < n; i += step) out[i] = f(in[i]...);  // the tail
}

template <class F, class Off, class Out, class... In, size_t... K>
__device__ __forceinline__ void apply_at(const F& f, const Off* off, Out* out,
                                         std::index_sequence<K...>, const In*... in) {
  out[off[0]] = f(in[off[K + 1]]...);
}

// Paths 2 and 3: Ix is Indexer32 or Indexer (64-bit).
template <class F, class Ix, class Out, class... In>
static __global__ void strided_kernel(F f, Ix ix, typename Ix::index_t n, Out* out,
                                      const In*... in) {
  using I = typename Ix::index_t;
  constexpr int N = 1 + int(sizeof...(In));
  const I step = I(gridDim.x) * blockDim.x;
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    I off[N];
    ix.offsets(i, off);
    apply_at(f, off, out, std::index_sequence_for<In...>{}, in...);
  }
}

inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Runs out[i] = f(in_0[i], ...) over out's shape; each input has out's shape
// (expanded views for broadcasting), its storage type In_k, and out has Out.
// See Note [CUDA elementwise paths]. Queued on `stream`; checks the launch.
template <class Out, class... In, class F>
void launch_elementwise(const char* kernel_name, const F& f, cuda::Stream stream,
                        const Tensor& out,
                        const std::array<const Tensor*, sizeof...(In)>& ins) {
  constexpr size_t M = sizeof...(In);
  constexpr int N = 1 + int(M);
  const int64_t n = out.numel();
  if (n == 0) return;
  Out* op = ptr<Out>(out);
  auto in_ptrs = [&]<size_t... K>(std::index_sequence<K...>) {
    return std::tuple<const In*...>(ptr<const In>(*ins[K])...);
  }(std::make_index_sequence<M>{});
  const cudaStream_t s = native(stream);

  Indexer<N> ix;
  if (share_dense_layout(out, ins)) {
    constexpr int VEC = kVecWidth<Out, In...>;
    bool aligned = aligned_to(op, sizeof(Out) * VEC);
    std::apply([&](const In*... p) { ((aligned = aligned && aligned_to(p, sizeof(In) * VEC)), ...); },
               in_ptrs);
    if (VEC > 1 && aligned) {
      std::apply(
          [&](const In*... p) {
            flat_vec_kernel<VEC, F, Out, In...>
                <<<grid_for(n / VEC + 1), kThreads, 0, s>>>(f, n, op, p...);
          },
          in_ptrs);
      DDP_CUDA_CHECK_LAUNCH(kernel_name);
      return;
    }
    // Storage order as one dim of unit strides.
    ix.ndim = 1;
    for (int d = 0; d < kMaxDims; ++d) {
      ix.sizes[d] = d == 0 ? n : 1;
      for (int k = 0; k < N; ++k) ix.strides[k][d] = d == 0 ? 1 : 0;
    }
  } else {
    std::array<const Shape*, N> strides;
    strides[0] = &out.strides();
    for (int k = 1; k < N; ++k) strides[size_t(k)] = &ins[size_t(k - 1)]->strides();
    ix = make_indexer<N>(out.shape(), strides);
  }
  std::apply(
      [&](const In*... p) {
        if (fits_in_32_bits(ix, n)) {
          strided_kernel<F, Indexer32<N>, Out, In...>
              <<<grid_for(n), kThreads, 0, s>>>(f, to_32_bits(ix), uint32_t(n), op, p...);
        } else {
          strided_kernel<F, Indexer<N>, Out, In...><<<grid_for(n), kThreads, 0, s>>>(f, ix, n, op, p...);
        }
      },
      in_ptrs);
  DDP_CUDA_CHECK_LAUNCH(kernel_name);
}

}  // namespace ddp::cuda_kernels
