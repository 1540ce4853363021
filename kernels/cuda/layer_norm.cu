// LayerNorm on CUDA, with the formulas of Note [LayerNorm formulas]
// (kernels/cpu/layer_norm.cpp). x is [rows, cols] contiguous.
//   forward:  one block per row: two block reductions (mean, then the
//             centred sum of squares), then y = x̂·w + b; mean and rstd are
//             saved in the compute type for backward.
//   backward: one block per row for dx (two sums: g and g·x̂); dw and db
//             are column sums over rows, one thread per column walking the
//             rows, so a warp reads consecutive columns (coalesced).

#include "cuda/common.cuh"
#include "kernel_list.h"

namespace ddp::cuda_kernels {

static __device__ __forceinline__ float dev_rsqrt(float x) { return rsqrtf(x); }
static __device__ __forceinline__ double dev_rsqrt(double x) { return ::rsqrt(x); }

template <class T>
static __global__ void layer_norm_forward_kernel(const T* x, const T* w, const T* b, double eps,
                                                 T* y, compute_t<T>* mean_out,
                                                 compute_t<T>* rstd_out, int64_t rows,
                                                 int64_t cols) {
  using C = compute_t<T>;
  __shared__ C sm[kThreads];
  auto add = [](C a, C c) { return a + c; };
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    C s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += load(xr[j]);
    const C mean = block_all_reduce(s, sm, add) / C(cols);
    C ss = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const C d = load(xr[j]) - mean;
      ss += d * d;
    }
    const C rstd = dev_rsqrt(block_all_reduce(ss, sm, add) / C(cols) + C(eps));
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      C v = (load(xr[j]) - mean) * rstd;
      if (w) v = v * load(w[j]);
      if (b) v = v + load(b[j]);
      yr[j] = store<T>(v);
    }
    if (threadIdx.x == 0) {
      mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
  }
}

template <class T>
static __global__ void layer_norm_dx_kernel(const T* dy, const T* x, const T* w,
                                            const compute_t<T>* mean, const compute_t<T>* rstd,
                                            T* dx, int64_t rows, int64_t cols) {
  using C = compute_t<T>;
  __shared__ C sm[kThreads];
  auto add = [](C a, C c) { return a + c; };
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* dyr = dy + r * cols;
    const T* xr = x + r * cols;
    const C m = mean[r], rs = rstd[r];
    C sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const C d = load(dyr[j]);
      const C g = w ? d * load(w[j]) : d;
      sg += g;
      sgx += g * (load(xr[j]) - m) * rs;
    }
    const C mean_g = block_all_reduce(sg, sm, add) / C(cols);
    const C mean_gx = block_all_reduce(sgx, sm, add) / C(cols);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const C d = load(dyr[j]);
      const C g = w ? d * load(w[j]) : d;
      const C xhat = (load(xr[j]) - m) * rs;
      dx[r * cols + j] = store<T>(rs * (g - mean_g - xhat * mean_gx));
    }
  }
}

template <class T>
static __global__ void layer_norm_dw_db_kernel(const T* dy, const T* x, const compute_t<T>* mean,
                                               const compute_t<T>* rstd, T* dw, T* db, int64_t rows,
                                               int64_t cols) {
  using C = compute_t<T>;
  DDP_KERNEL_LOOP(j, cols) {
    C sw = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const C d = load(dy[r * cols + j]);
      sw += d * (load(x[r * cols + j]) - mean[r]) * rstd[r];
      sb += d;
    }
    if (dw) dw[j] = store<T>(sw);
    if (db) db[j] = store<T>(sb);
  }
}

static unsigned threads_for(int64_t cols) {
  unsigned threads = 32;
  while (threads < unsigned(kThreads) && int64_t(threads) < cols) threads *= 2;
  return threads;
}

template <class T>
static const T* opt_ptr(const Tensor& t) {
  return t.defined() ? ptr<const T>(t) : nullptr;
}

static void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd,
                        cuda::Stream stream) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  if (rows == 0 || cols == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>(rows, 65536));
  dispatch_floating(x.dtype(), "layer_norm", [&]<class T>() {
    using C = compute_t<T>;
    layer_norm_forward_kernel<T><<<blocks, threads_for(cols), 0, native(stream)>>>(
        ptr<const T>(x), opt_ptr<T>(weight), opt_ptr<T>(bias), eps, ptr<T>(y), ptr<C>(mean),
        ptr<C>(rstd), rows, cols);
    DDP_CUDA_CHECK_LAUNCH("layer_norm_forward_kernel");
  });
}

static void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                         const Tensor& dweight, const Tensor& dbias, cuda::Stream stream) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  if (cols == 0) return;
  dispatch_floating(x.dtype(), "layer_norm_backward", [&]<class T>() {
    using C = compute_t<T>;
    if (dx.defined() && rows > 0) {
      const unsigned blocks = unsigned(std::min<int64_t>(rows, 65536));
      layer_norm_dx_kernel<T><<<blocks, threads_for(cols), 0, native(stream)>>>(
          ptr<const T>(dy), ptr<const T>(x), opt_ptr<T>(weight), ptr<const C>(mean),
          ptr<const C>(rstd), ptr<T>(dx), rows, cols);
      DDP_CUDA_CHECK_LAUNCH("layer_norm_dx_kernel");
    }
    if (dweight.defined() || dbias.defined()) {
      layer_norm_dw_db_kernel<T><<<grid_for(cols), kThreads, 0, native(stream)>>>(
          ptr<const T>(dy), ptr<const T>(x), ptr<const C>(mean), ptr<const C>(rstd),
          dweight.defined() ? ptr<T>(dweight) : nullptr, dbias.defined() ? ptr<T>(dbias) : nullptr,
          rows, cols);
      DDP_CUDA_CHECK_LAUNCH("layer_norm_dw_db_kernel");
    }
  });
}

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
                      layer_norm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias,
                                          on.stream);
                    })

}  // namespace ddp::cuda_kernels
