// See kernels/cpu/batch_norm.h. Loops run channel by channel over
// contiguous rows of S elements, which the compiler vectorises.

#include "cpu/batch_norm.h"

#include <cstdint>

#include "ddp/core/error.h"

namespace ddp::cpu_kernels {

namespace {

struct Dims {
  int64_t n, c, s;
};
Dims dims_of(const Tensor& x) {
  Dims d{x.size(0), x.size(1), 1};
  for (int64_t i = 2; i < x.dim(); ++i) d.s *= x.size(i);
  return d;
}

template <class T>
void stats(const Tensor& x, const Tensor& mean, const Tensor& var) {
  const Dims d = dims_of(x);
  const T* px = x.data<T>();
  const double count = double(d.n * d.s);
  for (int64_t c = 0; c < d.c; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < d.n; ++n) {
      const T* row = px + (n * d.c + c) * d.s;
      for (int64_t i = 0; i < d.s; ++i) sum += double(row[i]);
    }
    const double m = sum / count;
    double sq = 0;  // two passes: no cancellation in E[x²] − E[x]²
    for (int64_t n = 0; n < d.n; ++n) {
      const T* row = px + (n * d.c + c) * d.s;
      for (int64_t i = 0; i < d.s; ++i) sq += (double(row[i]) - m) * (double(row[i]) - m);
    }
    mean.data<T>()[c] = T(m);
    var.data<T>()[c] = T(sq / count);
  }
}

template <class T>
void apply(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
           const Tensor& bias, const Tensor& y) {
  const Dims d = dims_of(x);
  const T *px = x.data<T>(), *pm = mean.data<T>(), *pi = invstd.data<T>();
  const T* pw = weight.defined() ? weight.data<T>() : nullptr;
  const T* pb = bias.defined() ? bias.data<T>() : nullptr;
  T* py = y.data<T>();
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c) {
      const T scale = pi[c] * (pw ? pw[c] : T(1));
      const T shift = (pb ? pb[c] : T(0)) - pm[c] * scale;
      const int64_t base = (n * d.c + c) * d.s;
      for (int64_t i = 0; i < d.s; ++i) py[base + i] = px[base + i] * scale + shift;
    }
}

template <class T>
void backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
              const Tensor& weight, bool batch_stats, const Tensor& dx, const Tensor& dweight,
              const Tensor& dbias) {
  const Dims d = dims_of(x);
  const T *px = x.data<T>(), *pdy = dy.data<T>(), *pm = mean.data<T>(), *pi = invstd.data<T>();
  const T* pw = weight.defined() ? weight.data<T>() : nullptr;
  const double count = double(d.n * d.s);
  for (int64_t c = 0; c < d.c; ++c) {
    const double m = double(pm[c]), is = double(pi[c]);
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t n = 0; n < d.n; ++n) {
      const int64_t base = (n * d.c + c) * d.s;
      for (int64_t i = 0; i < d.s; ++i) {
        sum_dy += double(pdy[base + i]);
        sum_dy_xhat += double(pdy[base + i]) * (double(px[base + i]) - m) * is;
      }
    }
    if (dweight.defined()) dweight.data<T>()[c] = T(sum_dy_xhat);
    if (dbias.defined()) dbias.data<T>()[c] = T(sum_dy);
    if (!dx.defined()) continue;
    const double k = is * (pw ? double(pw[c]) : 1.0);
    const double mean_dy = batch_stats ? sum_dy / count : 0.0;
    const double mean_dy_xhat = batch_stats ? sum_dy_xhat / count : 0.0;
    T* pdx = dx.data<T>();
    for (int64_t n = 0; n < d.n; ++n) {
      const int64_t base = (n * d.c + c) * d.s;
      for (int64_t i = 0; i < d.s; ++i) {
        const double xhat = (double(px[base + i]) - m) * is;
        pdx[base + i] = T(k * (double(pdy[base + i]) - mean_dy - xhat * mean_dy_xhat));
      }
    }
  }
}

void check_dtype(const Tensor& x) {
  DDP_CHECK_T(DTypeError, x.dtype() == DType::f32 || x.dtype() == DType::f64,
              "batch_norm CPU kernel: f32 or f64, got {}", x.describe());
}

}  // namespace

void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var) {
  check_dtype(x);
  x.dtype() == DType::f32 ? stats<float>(x, mean, var) : stats<double>(x, mean, var);
}

void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& y) {
  check_dtype(x);
  x.dtype() == DType::f32 ? apply<float>(x, mean, invstd, weight, bias, y)
                          : apply<double>(x, mean, invstd, weight, bias, y);
}

void batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, bool batch_stats,
                         const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  check_dtype(x);
  if (x.dtype() == DType::f32)
    backward<float>(x, dy, mean, invstd, weight, batch_stats, dx, dweight, dbias);
  else
    backward<double>(x, dy, mean, invstd, weight, batch_stats, dx, dweight, dbias);
}

}  // namespace ddp::cpu_kernels
