// Row softmax / log_softmax and their backward on the CPU. Rows are
// [rows, cols] contiguous; math in f32 (f64 for f64): see Note [Compute type].

#include <cmath>
#include <vector>

#include "cpu/convert.h"
#include "cpu/kernels.h"
#include "kernel_list.h"
#include "cpu/strided.h"
#include "ddp/core/dispatch.h"

namespace ddp::cpu_kernels {

namespace {

// Sum with 8 independent accumulators: vectorizable without -ffast-math and
// a little more accurate than one running sum.
template <class C, class F>
C lane_sum(int64_t n, F term) {
  C acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += term(i + k);
  C tail = 0;
  for (; i < n; ++i) tail += term(i);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

template <class T>
void softmax_kernel(const Tensor& in, const Tensor& out, bool log) {
  using C = compute_t<T>;
  const int64_t rows = in.shape()[0], cols = in.shape()[1];
  if (rows == 0 || cols == 0) return;
  const T* x = ptr<const T>(in);
  T* y = ptr<T>(out);
  std::vector<C> row(size_t(cols), C(0));  // the row widened to C
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    C m = load(xr[0]);
    for (int64_t j = 0; j < cols; ++j) {
      const C v = load(xr[j]);
      row[size_t(j)] = v;
      m = (v != v || v > m) ? v : m;  // NaN propagates into the whole row
    }
    // A row of all -inf gives NaN (like torch): -inf - -inf.
    if (log) {
      const C s = lane_sum<C>(cols, [&](int64_t j) { return std::exp(row[size_t(j)] - m); });
      // (x - m) - log(s), not x - (m + log(s)): m + log(s) would round to
      // the coarse ulp of m when |m| is large.
      const C log_s = std::log(s);
      for (int64_t j = 0; j < cols; ++j) yr[j] = store<T>((row[size_t(j)] - m) - log_s);
    } else {
      for (int64_t j = 0; j < cols; ++j) row[size_t(j)] = std::exp(row[size_t(j)] - m);
      const C s = lane_sum<C>(cols, [&](int64_t j) { return row[size_t(j)]; });
      const C inv = C(1) / s;
      for (int64_t j = 0; j < cols; ++j) yr[j] = store<T>(row[size_t(j)] * inv);
    }
  }
}

template <class T>
void softmax_backward_kernel(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
  using C = compute_t<T>;
  const int64_t rows = y.shape()[0], cols = y.shape()[1];
  if (rows == 0 || cols == 0) return;
  const T* yp = ptr<const T>(y);
  const T* gp = ptr<const T>(dy);
  T* dp = ptr<T>(dx);
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = yp + r * cols;
    const T* gr = gp + r * cols;
    T* dr = dp + r * cols;
    if (log) {  // dx = dy - exp(y) * sum(dy)
      const C s = lane_sum<C>(cols, [&](int64_t j) { return load(gr[j]); });
      for (int64_t j = 0; j < cols; ++j) dr[j] = store<T>(load(gr[j]) - std::exp(load(yr[j])) * s);
    } else {  // dx = y * (dy - sum(dy * y))
      const C s = lane_sum<C>(cols, [&](int64_t j) { return load(gr[j]) * load(yr[j]); });
      for (int64_t j = 0; j < cols; ++j) dr[j] = store<T>(load(yr[j]) * (load(gr[j]) - s));
    }
  }
}

}  // namespace

DDP_REGISTER_KERNEL(softmax_forward, CPU, [](const Tensor& in, const Tensor& out, bool log) {
  dispatch_floating(out.dtype(), log ? "log_softmax" : "softmax",
                    [&]<class T>() { softmax_kernel<T>(in, out, log); });
})

DDP_REGISTER_KERNEL(softmax_backward, CPU,
                    [](const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
                      dispatch_floating(dx.dtype(),
                                        log ? "log_softmax_backward" : "softmax_backward",
                                        [&]<class T>() { softmax_backward_kernel<T>(y, dy, dx, log); });
                    })

}  // namespace ddp::cpu_kernels
