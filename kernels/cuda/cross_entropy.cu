// Fused cross-entropy on CUDA (contract in kernels/kernel_list.h, formulas in
// Note [Fused cross entropy] in src/nn/functional/loss.cpp). One block per
// row in both directions, each reading the row once:
//   forward:  every thread keeps an online log-sum-exp (running max m and
//             Σ exp(x − m), rescaled when m grows) and Σ x over its strided
//             columns; the block combines the triples with warp shuffles,
//             then one thread reads x[t] and writes loss and lse. A target
//             out of range goes to the device error record (Note [Deferred
//             device errors]) and the row's loss is NaN.
//   backward: dx = (exp(x − lse) − ε/C − (1−ε)·[c = t]) · scale, zeros for
//             an ignored row.
// Math in f32 (f64 for f64); f16/bf16 logits are read as they are.

#include <cmath>

#include "cuda/common.cuh"
#include "cuda/device_error.cuh"
#include "kernel_list.h"
#include "tensor/device_error.h"

namespace ddp::cuda_kernels {

namespace {

__device__ __forceinline__ float ce_exp(float x) { return expf(x); }
__device__ __forceinline__ double ce_exp(double x) { return ::exp(x); }
__device__ __forceinline__ float ce_log(float x) { return logf(x); }
__device__ __forceinline__ double ce_log(double x) { return ::log(x); }

template <class C>
struct LseSum {
  C m;   // running max (−inf before any element; NaN once a NaN is seen)
  C s;   // Σ exp(x − m)
  C sx;  // Σ x
};

template <class C>
__device__ __forceinline__ LseSum<C> combine(LseSum<C> a, LseSum<C> b) {
  const C m = (a.m != a.m || a.m > b.m) ? a.m : b.m;
  if (m != m) return {m, m, a.sx + b.sx};
  const C inf = C(INFINITY);
  const C sa = a.m == -inf ? C(0) : a.s * ce_exp(a.m - m);
  const C sb = b.m == -inf ? C(0) : b.s * ce_exp(b.m - m);
  return {m, sa + sb, a.sx + b.sx};
}

template <class C>
__device__ __forceinline__ LseSum<C> warp_combine(LseSum<C> v) {
  for (int off = 16; off > 0; off >>= 1) {
    LseSum<C> o{__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off),
                __shfl_xor_sync(0xffffffffu, v.sx, off)};
    v = combine(v, o);
  }
  return v;
}

constexpr int kRowThreads = 512;

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    cross_entropy_forward_kernel(const T* __restrict__ x, const int64_t* __restrict__ target,
                                 int64_t n, int64_t classes, int64_t ignore_index, double eps,
                                 compute_t<T>* __restrict__ loss, compute_t<T>* __restrict__ lse,
                                 DeviceErrorSlot rec) {
  using C = compute_t<T>;
  __shared__ LseSum<C> warp_parts[kRowThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  const C inf = C(INFINITY);
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const T* xr = x + i * classes;
    LseSum<C> acc{-inf, C(0), C(0)};
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
      const C v = load(xr[c]);
      acc.sx += v;
      if (v != v || v > acc.m) {  // a new max (or a NaN): rescale what was summed
        acc.s = (acc.m == -inf ? C(0) : acc.s * ce_exp(acc.m - v)) + C(1);
        acc.m = v;
      } else if (acc.m != -inf) {  // v = m = −inf adds nothing (and exp(−inf + inf) is NaN)
        acc.s += ce_exp(v - acc.m);
      }
    }
    acc = warp_combine(acc);
    if (lane == 0) warp_parts[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      LseSum<C> tot = warp_parts[0];
      for (int w = 1; w < warps; ++w) tot = combine(tot, warp_parts[w]);
      // A row of all −inf has no finite max: NaN, as the CPU's (−inf) − (−inf).
      const C row_lse = tot.m == -inf ? C(NAN) : tot.m + ce_log(tot.s);
      lse[i] = row_lse;
      const int64_t t = target[i];
      C l;
      if (t == ignore_index) {
        l = C(0);
      } else if (t < 0 || t >= classes) {
        report_index_error(rec, DeviceErrorOp::cross_entropy, t, i, classes);
        l = C(NAN);
      } else {
        l = C(1 - eps) * (row_lse - load(xr[t]));
        if (eps > 0) l += C(eps) * (row_lse - tot.sx / C(classes));
      }
      loss[i] = l;
    }
    __syncthreads();  // warp_parts is reused by the next row
  }
}

template <class T>
__global__ void cross_entropy_backward_kernel(const T* __restrict__ x,
                                              const int64_t* __restrict__ target,
                                              const compute_t<T>* __restrict__ lse,
                                              const compute_t<T>* __restrict__ scale, int64_t n,
                                              int64_t classes, int64_t ignore_index, double eps,
                                              T* __restrict__ dx) {
  using C = compute_t<T>;
  const C smooth = C(eps / double(classes)), hit = C(1 - eps);
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const T* xr = x + i * classes;
    T* dr = dx + i * classes;
    const int64_t t = target[i];
    if (t == ignore_index) {
      for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) dr[c] = store<T>(C(0));
      continue;
    }
    const C g = scale[i], row_lse = lse[i];
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
      C p = ce_exp(load(xr[c]) - row_lse) - smooth;
      if (c == t) p -= hit;
      dr[c] = store<T>(p * g);
    }
  }
}

unsigned row_threads(int64_t classes) {
  unsigned threads = 32;
  while (threads < unsigned(kRowThreads) && int64_t(threads) < classes) threads *= 2;
  return threads;
}

void launch_cross_entropy_forward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                  double label_smoothing, const Tensor& loss, const Tensor& lse) {
  OnDevice on(logits);
  const int64_t n = logits.size(0), classes = logits.size(1);
  if (n == 0) return;
  DeviceErrorSlot rec = detail::device_error_record(logits.device().index);
  const unsigned blocks = unsigned(std::min<int64_t>(n, 65536));
  dispatch_floating(logits.dtype(), "cross_entropy", [&]<class T>() {
    using C = compute_t<T>;
    cross_entropy_forward_kernel<T><<<blocks, row_threads(classes), 0, native(on.stream)>>>(
        ptr<const T>(logits), ptr<const int64_t>(target), n, classes, ignore_index, label_smoothing,
        ptr<C>(loss), ptr<C>(lse), rec);
    DDP_CUDA_CHECK_LAUNCH("cross_entropy_forward_kernel");
  });
}

void launch_cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse,
                                   const Tensor& scale, int64_t ignore_index,
                                   double label_smoothing, const Tensor& dx) {
  OnDevice on(logits);
  const int64_t n = logits.size(0), classes = logits.size(1);
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>(n, 65536));
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&]<class T>() {
    using C = compute_t<T>;
    cross_entropy_backward_kernel<T><<<blocks, row_threads(classes), 0, native(on.stream)>>>(
        ptr<const T>(logits), ptr<const int64_t>(target), ptr<const C>(lse), ptr<const C>(scale), n,
        classes, ignore_index, label_smoothing, ptr<T>(dx));
    DDP_CUDA_CHECK_LAUNCH("cross_entropy_backward_kernel");
  });
}

}  // namespace

DDP_REGISTER_KERNEL(cross_entropy_forward, CUDA, launch_cross_entropy_forward)
DDP_REGISTER_KERNEL(cross_entropy_backward, CUDA, launch_cross_entropy_backward)

}  // namespace ddp::cuda_kernels
