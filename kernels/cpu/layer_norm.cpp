// LayerNorm on the CPU: forward and backward fused per row.
//
// Note [LayerNorm formulas]
// Per row of n = cols values, in the compute type C (f32 for f16/bf16/f32,
// f64 for f64):
//   mean = Σx / n,  var = Σ(x - mean)² / n  (biased, two passes, as torch),
//   rstd = 1 / sqrt(var + eps),  x̂ = (x - mean)·rstd,  y = x̂·w + b.
// Backward with g = dy·w (g = dy without weight):
//   dx = rstd · (g - mean(g) - x̂ · mean(g·x̂)),
//   dw = Σ_rows dy·x̂,  db = Σ_rows dy.
// The CUDA kernels (kernels/cuda/layer_norm.cu) use the same formulas.
// Here every sum (per row, and dw/db across rows) adds up in double: a row
// can be millions of values (layer_norm over [rows, cols] at once), where a
// running f32 sum drifts by ~n·2⁻²⁴ — 2e-3 of the result at 6.3M values, found
// as a CPU/GPU mismatch on the first GPU run; the CPU is the reference.

#include <cmath>
#include <vector>

#include "cpu/convert.h"
#include "cpu/strided.h"
#include "ddp/core/dispatch.h"
#include "kernel_list.h"

namespace ddp::cpu_kernels {

namespace {

template <class T>
void forward_kernel(const Tensor& xt, const Tensor& wt, const Tensor& bt, double eps,
                    const Tensor& yt, const Tensor& mt, const Tensor& rt) {
  using C = compute_t<T>;
  const int64_t rows = xt.shape()[0], cols = xt.shape()[1];
  const T* x = ptr<const T>(xt);
  const T* w = wt.defined() ? ptr<const T>(wt) : nullptr;
  const T* b = bt.defined() ? ptr<const T>(bt) : nullptr;
  T* y = ptr<T>(yt);
  C* mean_out = ptr<C>(mt);
  C* rstd_out = ptr<C>(rt);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    double s = 0;
    for (int64_t j = 0; j < cols; ++j) s += double(load(xr[j]));
    const C mean = C(s / double(cols));
    double ss = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double d = double(load(xr[j]) - mean);
      ss += d * d;
    }
    const C rstd = C(1.0 / std::sqrt(ss / double(cols) + eps));
    for (int64_t j = 0; j < cols; ++j) {
      C v = (load(xr[j]) - mean) * rstd;
      if (w) v = v * load(w[j]);
      if (b) v = v + load(b[j]);
      yr[j] = store<T>(v);
    }
    mean_out[r] = mean;
    rstd_out[r] = rstd;
  }
}

template <class T>
void backward_kernel(const Tensor& dyt, const Tensor& xt, const Tensor& wt, const Tensor& mt,
                     const Tensor& rt, const Tensor& dxt, const Tensor& dwt, const Tensor& dbt) {
  using C = compute_t<T>;
  const int64_t rows = xt.shape()[0], cols = xt.shape()[1];
  const T* dy = ptr<const T>(dyt);
  const T* x = ptr<const T>(xt);
  const T* w = wt.defined() ? ptr<const T>(wt) : nullptr;
  const C* mean = ptr<const C>(mt);
  const C* rstd = ptr<const C>(rt);
  T* dx = dxt.defined() ? ptr<T>(dxt) : nullptr;
  // dw and db accumulate across rows in C, written once at the end.
  std::vector<double> dw(dwt.defined() ? size_t(cols) : 0, 0.0);
  std::vector<double> db(dbt.defined() ? size_t(cols) : 0, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * cols;
    const T* xr = x + r * cols;
    const C m = mean[r], rs = rstd[r];
    double sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const C xhat = (load(xr[j]) - m) * rs;
      const C d = load(dyr[j]);
      const C g = w ? d * load(w[j]) : d;
      sum_g += g;
      sum_gx += g * xhat;
      if (!dw.empty()) dw[size_t(j)] += double(d * xhat);
      if (!db.empty()) db[size_t(j)] += double(d);
    }
    if (!dx) continue;
    const C mean_g = C(sum_g / double(cols)), mean_gx = C(sum_gx / double(cols));
    T* dxr = dx + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const C xhat = (load(xr[j]) - m) * rs;
      const C d = load(dyr[j]);
      const C g = w ? d * load(w[j]) : d;
      dxr[j] = store<T>(rs * (g - mean_g - xhat * mean_gx));
    }
  }
  if (!dw.empty())
    for (int64_t j = 0; j < cols; ++j) ptr<T>(dwt)[j] = store<T>(C(dw[size_t(j)]));
  if (!db.empty())
    for (int64_t j = 0; j < cols; ++j) ptr<T>(dbt)[j] = store<T>(C(db[size_t(j)]));
}

}  // namespace

DDP_REGISTER_KERNEL(layer_norm_forward, CPU,
                    [](const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd) {
                      dispatch_floating(x.dtype(), "layer_norm", [&]<class T>() {
                        forward_kernel<T>(x, weight, bias, eps, y, mean, rstd);
                      });
                    })

DDP_REGISTER_KERNEL(layer_norm_backward, CPU,
                    [](const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                       const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                       const Tensor& dbias) {
                      dispatch_floating(x.dtype(), "layer_norm_backward", [&]<class T>() {
                        backward_kernel<T>(dy, x, weight, mean, rstd, dx, dweight, dbias);
                      });
                    })

}  // namespace ddp::cpu_kernels
