// LayerNorm on CUDA, with the formulas of Note [LayerNorm formulas]
// (kernels/cpu/layer_norm.cpp). x is [rows, cols] contiguous.
//
// Note [CUDA LayerNorm kernels]
//   forward and dx: rows up to kWarpRowCols wide get one warp per row (8
//     rows per 256-thread block: no block barriers, shuffles only); wider
//     rows get one block per row. Both read 16-byte vectors (8 bf16/f16, 4
//     f32, 2 f64) when the row length and every pointer allow it, else one
//     element at a time. The row is read three times (sum, centred sum of
//     squares, output); the second and third reads hit L1/L2.
//   dw and db: column sums over all rows. One thread per column walking
//     every row starves the GPU (width 768 is 3 blocks for 132 SMs), so the
//     rows are cut into slices: block (column tile of 32, slice) sums its
//     slice with 32×8 threads, combines the 8 partial sums per column in
//     shared memory in a fixed order and writes one partial per (slice,
//     column) in the compute type; a second kernel adds each column's
//     partials in slice order. The slicing depends only on the shape, so
//     the result is deterministic (no float atomics).

#include "cuda/common.cuh"
#include "kernel_list.h"

namespace ddp::cuda_kernels {

namespace {

constexpr int64_t kWarpRowCols = 1024;
constexpr int kRowsPerBlock = kThreads / 32;

__device__ __forceinline__ float dev_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double dev_rsqrt(double x) { return ::rsqrt(x); }

template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// Calls f(j, values[V]) for the row's elements owned by lane `tid` of
// `nthreads`, V at a time (V = 1: one at a time).
template <int V, class T, class F>
__device__ __forceinline__ void for_row(const T* row, int64_t cols, int tid, int nthreads, F f) {
  using C = compute_t<T>;
  for (int64_t j = int64_t(tid) * V; j < cols; j += int64_t(nthreads) * V) {
    const Vec<T, V> in = *reinterpret_cast<const Vec<T, V>*>(row + j);
    C vals[V];
#pragma unroll
    for (int k = 0; k < V; ++k) vals[k] = load(in.v[k]);
    f(j, vals);
  }
}

template <class C>
__device__ __forceinline__ C warp_sum(C v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Sum over the row's threads: the warp (warp_rows) or the block.
template <bool WarpRows, class C>
__device__ __forceinline__ C row_sum(C v, C* sm) {
  if constexpr (WarpRows) {
    return warp_sum(v);
  } else {
    return block_all_reduce(v, sm, [](C a, C b) { return a + b; });
  }
}

template <class T, int V, bool WarpRows>
__global__ void layer_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                          const T* __restrict__ b, double eps, T* __restrict__ y,
                                          compute_t<T>* __restrict__ mean_out,
                                          compute_t<T>* __restrict__ rstd_out, int64_t rows,
                                          int64_t cols) {
  using C = compute_t<T>;
  __shared__ C sm[WarpRows ? 1 : kThreads];
  const int tid = WarpRows ? int(threadIdx.x & 31) : int(threadIdx.x);
  const int nthreads = WarpRows ? 32 : int(blockDim.x);
  const int64_t row0 =
      WarpRows ? int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5) : int64_t(blockIdx.x);
  const int64_t row_step = WarpRows ? int64_t(gridDim.x) * kRowsPerBlock : int64_t(gridDim.x);
  for (int64_t r = row0; r < rows; r += row_step) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    C s = 0;
    for_row<V>(xr, cols, tid, nthreads, [&](int64_t, const C* v) {
#pragma unroll
      for (int k = 0; k < V; ++k) s += v[k];
    });
    const C mean = row_sum<WarpRows>(s, sm) / C(cols);
    C ss = 0;
    for_row<V>(xr, cols, tid, nthreads, [&](int64_t, const C* v) {
#pragma unroll
      for (int k = 0; k < V; ++k) ss += (v[k] - mean) * (v[k] - mean);
    });
    const C rstd = dev_rsqrt(row_sum<WarpRows>(ss, sm) / C(cols) + C(eps));
    for_row<V>(xr, cols, tid, nthreads, [&](int64_t j, const C* v) {
      Vec<T, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        C o = (v[k] - mean) * rstd;
        if (w) o = o * load(w[j + k]);
        if (b) o = o + load(b[j + k]);
        out.v[k] = store<T>(o);
      }
      *reinterpret_cast<Vec<T, V>*>(yr + j) = out;
    });
    if (tid == 0) {
      mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
  }
}

template <class T, int V, bool WarpRows>
__global__ void layer_norm_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                     const T* __restrict__ w, const compute_t<T>* __restrict__ mean,
                                     const compute_t<T>* __restrict__ rstd, T* __restrict__ dx,
                                     int64_t rows, int64_t cols) {
  using C = compute_t<T>;
  __shared__ C sm[WarpRows ? 1 : kThreads];
  const int tid = WarpRows ? int(threadIdx.x & 31) : int(threadIdx.x);
  const int nthreads = WarpRows ? 32 : int(blockDim.x);
  const int64_t row0 =
      WarpRows ? int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5) : int64_t(blockIdx.x);
  const int64_t row_step = WarpRows ? int64_t(gridDim.x) * kRowsPerBlock : int64_t(gridDim.x);
  for (int64_t r = row0; r < rows; r += row_step) {
    const T* dyr = dy + r * cols;
    const T* xr = x + r * cols;
    const C m = mean[r], rs = rstd[r];
    C sg = 0, sgx = 0;
    for (int64_t j = int64_t(tid) * V; j < cols; j += int64_t(nthreads) * V) {
      const Vec<T, V> dv = *reinterpret_cast<const Vec<T, V>*>(dyr + j);
      const Vec<T, V> xv = *reinterpret_cast<const Vec<T, V>*>(xr + j);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const C g = w ? load(dv.v[k]) * load(w[j + k]) : load(dv.v[k]);
        sg += g;
        sgx += g * (load(xv.v[k]) - m) * rs;
      }
    }
    const C mean_g = row_sum<WarpRows>(sg, sm) / C(cols);
    const C mean_gx = row_sum<WarpRows>(sgx, sm) / C(cols);
    for (int64_t j = int64_t(tid) * V; j < cols; j += int64_t(nthreads) * V) {
      const Vec<T, V> dv = *reinterpret_cast<const Vec<T, V>*>(dyr + j);
      const Vec<T, V> xv = *reinterpret_cast<const Vec<T, V>*>(xr + j);
      Vec<T, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const C g = w ? load(dv.v[k]) * load(w[j + k]) : load(dv.v[k]);
        const C xhat = (load(xv.v[k]) - m) * rs;
        out.v[k] = store<T>(rs * (g - mean_g - xhat * mean_gx));
      }
      *reinterpret_cast<Vec<T, V>*>(dx + r * cols + j) = out;
    }
  }
}

constexpr int kColTile = 32, kRowLanes = 8;

// Block (column tile, slice): partial Σ dy·x̂ and Σ dy over the slice's rows.
template <class T>
__global__ void layer_norm_dw_db_partial_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                const compute_t<T>* __restrict__ mean,
                                                const compute_t<T>* __restrict__ rstd,
                                                compute_t<T>* __restrict__ part_w,
                                                compute_t<T>* __restrict__ part_b, int64_t rows,
                                                int64_t cols, int64_t rows_per_slice) {
  using C = compute_t<T>;
  __shared__ C sw[kRowLanes][kColTile + 1];
  __shared__ C sb[kRowLanes][kColTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = int64_t(blockIdx.x) * kColTile + tx;
  const int64_t slice = blockIdx.y;
  const int64_t r_begin = slice * rows_per_slice;
  const int64_t r_end = std::min(rows, r_begin + rows_per_slice);
  C aw = 0, ab = 0;
  if (c < cols) {
    for (int64_t r = r_begin + ty; r < r_end; r += kRowLanes) {
      const C d = load(dy[r * cols + c]);
      aw += d * (load(x[r * cols + c]) - mean[r]) * rstd[r];
      ab += d;
    }
  }
  sw[ty][tx] = aw;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && c < cols) {
    C tw = 0, tb = 0;
    for (int k = 0; k < kRowLanes; ++k) {
      tw += sw[k][tx];
      tb += sb[k][tx];
    }
    part_w[slice * cols + c] = tw;
    part_b[slice * cols + c] = tb;
  }
}

template <class T>
__global__ void layer_norm_dw_db_finish_kernel(const compute_t<T>* __restrict__ part_w,
                                               const compute_t<T>* __restrict__ part_b,
                                               int64_t slices, int64_t cols, T* dw, T* db) {
  using C = compute_t<T>;
  DDP_KERNEL_LOOP(c, cols) {
    C tw = 0, tb = 0;
    for (int64_t s = 0; s < slices; ++s) {
      tw += part_w[s * cols + c];
      tb += part_b[s * cols + c];
    }
    if (dw) dw[c] = store<T>(tw);
    if (db) db[c] = store<T>(tb);
  }
}

unsigned threads_for(int64_t cols) {
  unsigned threads = 32;
  while (threads < unsigned(kThreads) && int64_t(threads) < cols) threads *= 2;
  return threads;
}

template <class T>
const T* opt_ptr(const Tensor& t) {
  return t.defined() ? ptr<const T>(t) : nullptr;
}

bool aligned16(const Tensor& t) {
  return !t.defined() || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// The vector width for rows of this length and these tensors: 16 bytes, or 1.
template <class T>
int vec_width(int64_t cols, std::initializer_list<const Tensor*> ts) {
  constexpr int v = int(16 / sizeof(T));
  if (cols % v != 0) return 1;
  for (const Tensor* t : ts)
    if (!aligned16(*t)) return 1;
  return v;
}

// Launches K<T, V, warp_rows> over the rows with the shape's geometry.
template <class T, class Launch>
void launch_rows(int64_t rows, int64_t cols, int vec, Launch launch) {
  constexpr int V = int(16 / sizeof(T));
  const bool warp_rows = cols <= kWarpRowCols;
  const unsigned blocks = unsigned(
      std::min<int64_t>(warp_rows ? (rows + kRowsPerBlock - 1) / kRowsPerBlock : rows, 65536));
  const unsigned threads = warp_rows ? unsigned(kThreads) : threads_for(cols / vec);
  if (vec == V) {
    if (warp_rows)
      launch.template operator()<V, true>(blocks, threads);
    else
      launch.template operator()<V, false>(blocks, threads);
  } else {
    if (warp_rows)
      launch.template operator()<1, true>(blocks, threads);
    else
      launch.template operator()<1, false>(blocks, threads);
  }
}

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd,
                        cuda::Stream stream) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  if (rows == 0 || cols == 0) return;
  dispatch_floating(x.dtype(), "layer_norm", [&]<class T>() {
    using C = compute_t<T>;
    const int vec = vec_width<T>(cols, {&x, &weight, &bias, &y});
    launch_rows<T>(rows, cols, vec, [&]<int V, bool W>(unsigned blocks, unsigned threads) {
      layer_norm_forward_kernel<T, V, W><<<blocks, threads, 0, native(stream)>>>(
          ptr<const T>(x), opt_ptr<T>(weight), opt_ptr<T>(bias), eps, ptr<T>(y), ptr<C>(mean),
          ptr<C>(rstd), rows, cols);
      DDP_CUDA_CHECK_LAUNCH("layer_norm_forward_kernel");
    });
  });
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                         const Tensor& dweight, const Tensor& dbias, cuda::Stream stream) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  if (cols == 0) return;
  dispatch_floating(x.dtype(), "layer_norm_backward", [&]<class T>() {
    using C = compute_t<T>;
    if (dx.defined() && rows > 0) {
      const int vec = vec_width<T>(cols, {&dy, &x, &weight, &dx});
      launch_rows<T>(rows, cols, vec, [&]<int V, bool W>(unsigned blocks, unsigned threads) {
        layer_norm_dx_kernel<T, V, W><<<blocks, threads, 0, native(stream)>>>(
            ptr<const T>(dy), ptr<const T>(x), opt_ptr<T>(weight), ptr<const C>(mean),
            ptr<const C>(rstd), ptr<T>(dx), rows, cols);
        DDP_CUDA_CHECK_LAUNCH("layer_norm_dx_kernel");
      });
    }
    if (dweight.defined() || dbias.defined()) {
      // See Note [CUDA LayerNorm kernels]: about 1024 blocks of partial sums,
      // slices of at least 32 rows.
      const int64_t tiles = (cols + kColTile - 1) / kColTile;
      const int64_t want_slices = std::max<int64_t>(1, 1024 / tiles);
      const int64_t slices =
          std::clamp<int64_t>((rows + 31) / 32, 1, std::min<int64_t>(want_slices, 65535));
      const int64_t rows_per_slice = std::max<int64_t>(1, (rows + slices - 1) / slices);
      const TensorOptions part_opts =
          TensorOptions(std::is_same_v<C, double> ? DType::f64 : DType::f32).device(x.device());
      Tensor part_w = Tensor::empty({slices, cols}, part_opts);
      Tensor part_b = Tensor::empty({slices, cols}, part_opts);
      layer_norm_dw_db_partial_kernel<T><<<dim3(unsigned(tiles), unsigned(slices)),
                                           dim3(kColTile, kRowLanes), 0, native(stream)>>>(
          ptr<const T>(dy), ptr<const T>(x), ptr<const C>(mean), ptr<const C>(rstd), ptr<C>(part_w),
          ptr<C>(part_b), rows, cols, rows_per_slice);
      DDP_CUDA_CHECK_LAUNCH("layer_norm_dw_db_partial_kernel");
      layer_norm_dw_db_finish_kernel<T><<<grid_for(cols), kThreads, 0, native(stream)>>>(
          ptr<const C>(part_w), ptr<const C>(part_b), slices, cols,
          dweight.defined() ? ptr<T>(dweight) : nullptr, dbias.defined() ? ptr<T>(dbias) : nullptr);
      DDP_CUDA_CHECK_LAUNCH("layer_norm_dw_db_finish_kernel");
    }
  });
}

}  // namespace

DDP_REGISTER_KERNEL(layer_norm_forward, CUDA,
                    [](const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd) {
                      OnDevice on(x);
                      layer_norm_forward(x, weight, bias, eps, y, mean, rstd, on.stream);
                    })
DDP_REGISTER_KERNEL(layer_norm_backward, CUDA,
                    [](const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                       const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                       const Tensor& dbias) {
                      OnDevice on(x);
                      layer_norm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias, on.stream);
                    })

}  // namespace ddp::cuda_kernels
