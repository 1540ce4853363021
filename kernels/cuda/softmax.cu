// Row softmax / log_softmax and their backward on CUDA. Rows are [rows, cols]
// contiguous; math in f32 (f64 for f64), see Note [Compute type]. One block
// per row as in Note [CUDA row reductions] (reduce.cu); the formulas are the
// CPU kernel's (kernels/cpu/softmax.cpp):
//   softmax:      y = exp(x - m) * (1 / sum(exp(x - m)))
//   log_softmax:  y = (x - m) - log(sum(exp(x - m)))
//   backward:     softmax dx = y * (dy - sum(dy * y)); log dx = dy - exp(y) * sum(dy)
// m is the row max; a NaN propagates into the whole row, and a row of all
// -inf gives NaN, like torch.

#include "cuda/common.cuh"
#include "kernel_list.h"

namespace ddp::cuda_kernels {

__device__ __forceinline__ float dev_exp(float x) { return expf(x); }
__device__ __forceinline__ double dev_exp(double x) { return ::exp(x); }
__device__ __forceinline__ float dev_log(float x) { return logf(x); }
__device__ __forceinline__ double dev_log(double x) { return ::log(x); }

template <class T>
static __global__ void softmax_kernel(const T* in, T* out, int64_t rows, int64_t cols, bool log) {
  using C = compute_t<T>;
  __shared__ C sm[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = in + r * cols;
    T* y = out + r * cols;
    C m = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const C v = load(x[j]);
      m = (v != v || v > m) ? v : m;
    }
    m = block_all_reduce(m, sm, [](C a, C b) { return (a != a || a > b) ? a : b; });
    C s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += dev_exp(load(x[j]) - m);
    s = block_all_reduce(s, sm, [](C a, C b) { return a + b; });
    if (log) {
      const C log_s = dev_log(s);
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
        y[j] = store<T>((load(x[j]) - m) - log_s);
    } else {
      const C inv = C(1) / s;
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
        y[j] = store<T>(dev_exp(load(x[j]) - m) * inv);
    }
  }
}

template <class T>
static __global__ void softmax_backward_kernel(const T* yp, const T* gp, T* dp, int64_t rows,
                                               int64_t cols, bool log) {
  using C = compute_t<T>;
  __shared__ C sm[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* y = yp + r * cols;
    const T* g = gp + r * cols;
    T* dx = dp + r * cols;
    C s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      s += log ? load(g[j]) : load(g[j]) * load(y[j]);
    s = block_all_reduce(s, sm, [](C a, C b) { return a + b; });
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const C yv = load(y[j]), gv = load(g[j]);
      dx[j] = store<T>(log ? gv - dev_exp(yv) * s : yv * (gv - s));
    }
  }
}

static void row_geometry(const Tensor& t, int64_t& rows, int64_t& cols, unsigned& blocks,
                         unsigned& threads) {
  rows = t.shape()[0];
  cols = t.shape()[1];
  blocks = unsigned(std::min<int64_t>(rows, 65536));
  threads = 32;
  while (threads < unsigned(kThreads) && int64_t(threads) < cols) threads *= 2;
}

static void softmax_rows(const Tensor& in, const Tensor& out, bool log, cuda::Stream stream) {
  if (in.numel() == 0) return;
  int64_t rows, cols;
  unsigned blocks, threads;
  row_geometry(in, rows, cols, blocks, threads);
  dispatch_floating(out.dtype(), log ? "log_softmax" : "softmax", [&]<class T>() {
    softmax_kernel<T>
        <<<blocks, threads, 0, native(stream)>>>(ptr<const T>(in), ptr<T>(out), rows, cols, log);
    DDP_CUDA_CHECK_LAUNCH("softmax_kernel");
  });
}

static void softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log,
                           cuda::Stream stream) {
  if (y.numel() == 0) return;
  int64_t rows, cols;
  unsigned blocks, threads;
  row_geometry(y, rows, cols, blocks, threads);
  dispatch_floating(dx.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&]<class T>() {
    softmax_backward_kernel<T><<<blocks, threads, 0, native(stream)>>>(ptr<const T>(y), ptr<const T>(dy),
                                                               ptr<T>(dx), rows, cols, log);
    DDP_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
  });
}

DDP_REGISTER_KERNEL(softmax_forward, CUDA, [](const Tensor& in, const Tensor& out, bool log) {
  OnDevice on(out);
  softmax_rows(in, out, log, on.stream);
})
DDP_REGISTER_KERNEL(softmax_backward, CUDA,
                    [](const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
                      OnDevice on(dx);
                      softmax_rows_backward(y, dy, dx, log, on.stream);
                    })

}  // namespace ddp::cuda_kernels
