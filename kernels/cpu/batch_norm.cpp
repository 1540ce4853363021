// batch_norm on the CPU (contracts in kernels/kernel_list.h). The loops
// work on contiguous [N, C, S] tensors (S = H·W) of f32 or f64, per-channel
// vectors [C] of the same dtype, weight undefined meaning 1, sums in double;
// they run channel by channel over contiguous rows of S elements, which the
// compiler vectorises. The registered kernels bring other layouts (NHWC) and
// f16/bf16 to that form and write their results back in the caller's layout
// and dtype: CPU half precision is for tests, not speed.

#include <cstdint>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/error.h"
#include "ddp/tensor/ops.h"
#include "kernel_list.h"
#include "tensor/running_stats.h"

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

// Note [Batch-norm sums]
// Each row (one sample's plane of one channel, S elements) is summed in
// kLanes independent accumulators of T, which the compiler turns into SIMD
// adds; the rows' sums are then added in double. An f32 row of a ResNet
// (S <= 1024 for 32x32 images) thus adds about S / 8 values per lane in
// float, far inside the 1e-4 tolerance batch statistics are checked to,
// while the double across rows keeps large batches accurate. One serial
// double accumulator per channel cannot vectorise: it made batch_norm
// about 13% of a resnet20 CPU step.
template <class T, class F>
double lane_sum(int64_t s, F&& f) {
  constexpr int kLanes = 8;
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= s; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += f(i + j);
  double total = 0;
  for (; i < s; ++i) total += double(f(i));
  for (int j = 0; j < kLanes; ++j) total += double(acc[j]);
  return total;
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
      sum += lane_sum<T>(d.s, [row](int64_t i) { return row[i]; });
    }
    const T m = T(sum / count);
    double sq = 0;  // two passes: no cancellation in E[x²] − E[x]²
    for (int64_t n = 0; n < d.n; ++n) {
      const T* row = px + (n * d.c + c) * d.s;
      sq += lane_sum<T>(d.s, [row, m](int64_t i) { return (row[i] - m) * (row[i] - m); });
    }
    mean.data<T>()[c] = m;
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
    const T m = pm[c], is = pi[c];
    double sum_dy = 0, sum_dy_xc = 0;  // see Note [Batch-norm sums]
    for (int64_t n = 0; n < d.n; ++n) {
      const T *rx = px + (n * d.c + c) * d.s, *rdy = pdy + (n * d.c + c) * d.s;
      sum_dy += lane_sum<T>(d.s, [rdy](int64_t i) { return rdy[i]; });
      sum_dy_xc += lane_sum<T>(d.s, [rx, rdy, m](int64_t i) { return rdy[i] * (rx[i] - m); });
    }
    const double sum_dy_xhat = sum_dy_xc * double(is);
    if (dweight.defined()) dweight.data<T>()[c] = T(sum_dy_xhat);
    if (dbias.defined()) dbias.data<T>()[c] = T(sum_dy);
    if (!dx.defined()) continue;
    const T k = is * (pw ? pw[c] : T(1));
    const T mean_dy = batch_stats ? T(sum_dy / count) : T(0);
    const T mean_dy_xhat = batch_stats ? T(sum_dy_xhat / count) : T(0);
    T* pdx = dx.data<T>();
    for (int64_t n = 0; n < d.n; ++n) {
      const int64_t base = (n * d.c + c) * d.s;
      for (int64_t i = 0; i < d.s; ++i) {
        const T xhat = (px[base + i] - m) * is;
        pdx[base + i] = k * (pdy[base + i] - mean_dy - xhat * mean_dy_xhat);
      }
    }
  }
}

// t as a contiguous tensor of the compute dtype (f64 for f64, else f32).
Tensor compute_form(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor c = t.contiguous();
  return c.dtype() == DType::f64 || c.dtype() == DType::f32 ? c : c.to(DType::f32);
}
Tensor as_dtype(const Tensor& t, DType dt) { return t.defined() ? t.to(dt).contiguous() : t; }

// Where the loops write an output: `out` itself when it is contiguous in the
// compute dtype dt, else a contiguous buffer that copy_back() then copies into
// `out` (any layout and dtype). Undefined stays undefined.
Tensor buffer_for(const Tensor& out, DType dt) {
  if (!out.defined() || (out.is_contiguous() && out.dtype() == dt)) return out;
  return Tensor::empty(out.shape(), TensorOptions(dt));
}
void copy_back(const Tensor& buffer, const Tensor& out) {
  if (out.defined() && !buffer.is_same(out)) Tensor(out).copy_(buffer);
}

template <class F>
void on_dtype(DType dt, F&& fn) {
  dt == DType::f32 ? fn.template operator()<float>() : fn.template operator()<double>();
}

void train_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const Tensor& running_mean, const Tensor& running_var, double momentum,
                   double eps, const Tensor& y, const Tensor& save_mean,
                   const Tensor& save_invstd) {
  Tensor xc = compute_form(x);
  const DType dt = xc.dtype();
  const int64_t c = x.size(1);
  Tensor mean = Tensor::empty({c}, TensorOptions(dt)), var = Tensor::empty({c}, TensorOptions(dt));
  on_dtype(dt, [&]<class T>() { stats<T>(xc, mean, var); });
  const double n = double(x.numel() / c);
  update_running_stat(running_mean, mean, momentum);
  update_running_stat(running_var, var * (n / (n - 1)), momentum);
  Tensor invstd = rsqrt(var + eps);
  Tensor w = as_dtype(weight, dt), b = as_dtype(bias, dt), out = buffer_for(y, dt);
  on_dtype(dt, [&]<class T>() { apply<T>(xc, mean, invstd, w, b, out); });
  copy_back(out, y);
  Tensor(save_mean).copy_(mean);
  Tensor(save_invstd).copy_(invstd);
}

void eval_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, double eps,
                  const Tensor& y) {
  Tensor xc = compute_form(x);
  const DType dt = xc.dtype();
  Tensor mean = running_mean.to(dt).contiguous();
  Tensor invstd = rsqrt(running_var.to(dt) + eps).contiguous();
  Tensor w = as_dtype(weight, dt), b = as_dtype(bias, dt), out = buffer_for(y, dt);
  on_dtype(dt, [&]<class T>() { apply<T>(xc, mean, invstd, w, b, out); });
  copy_back(out, y);
}

void backward_kernel(const Tensor& x, const Tensor& dy, const Tensor& weight,
                     const Tensor& save_mean, const Tensor& save_invstd, bool batch_stats,
                     double /*eps: folded into save_invstd*/, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias) {
  Tensor xc = compute_form(x);
  const DType dt = xc.dtype();
  Tensor dyc = as_dtype(dy, dt);
  Tensor mean = as_dtype(save_mean, dt), invstd = as_dtype(save_invstd, dt);
  Tensor w = as_dtype(weight, dt);
  Tensor dxo = buffer_for(dx, dt), dwo = buffer_for(dweight, dt), dbo = buffer_for(dbias, dt);
  on_dtype(dt, [&]<class T>() {
    backward<T>(xc, dyc, mean, invstd, w, batch_stats, dxo, dwo, dbo);
  });
  copy_back(dxo, dx);
  copy_back(dwo, dweight);
  copy_back(dbo, dbias);
}

}  // namespace

DDP_REGISTER_KERNEL(batch_norm_train_forward, CPU, train_forward)
DDP_REGISTER_KERNEL(batch_norm_eval_forward, CPU, eval_forward)
DDP_REGISTER_KERNEL(batch_norm_backward, CPU, backward_kernel)

}  // namespace ddp::cpu_kernels
