// batch_norm on the CPU (contracts in kernels/kernel_list.h). The loops
// read x, dy and write y, dx in the caller's layout, contiguous [N, C, S]
// (S = H·W) or 4-D NHWC, and in the caller's dtype: f32 and f64, and f16 /
// bf16 loaded into f32 element by element (Note [Compute type]), so no
// layout or dtype copy is made. Per-channel values (weight, bias,
// statistics) are small [C] vectors in the compute type; sums are in double
// across rows (Note [Batch-norm sums]).
//
// Note [Batch-norm NHWC loops]
// A channels-last tensor is a [M, C] matrix (M = N·H·W) with C innermost.
// Its per-channel sums add whole rows of C values into C accumulators (one
// SIMD add per vector of channels) for a block of kRowBlock rows, then move
// the block's sums into double; the element-wise passes (apply, dx) are one
// sweep over the matrix with the per-channel coefficients indexed by c.
// Converting to NCHW and back instead cost two full copies per call, which
// was most of batch_norm's time in a channels-last ResNet step.
//
// Note [Fused BatchNorm + add + ReLU loops]
// batch_norm_add_relu's kernels are the same loops with the add and the
// ReLU folded into the apply sweep (one read of x and residual, one write of
// y, instead of writing bn(x), reading it back with the residual for the
// add, and once more for the ReLU), and the ReLU's backward folded into the
// sums and the dx sweep for NHWC (the mask y > 0 applied as dy is read;
// dresidual, when wanted, written in the sums' pass and read back as dz by
// the rest; NCHW masks in a pass of its own, see add_relu_backward). Each
// value is computed with the composed ops' expressions in their order (the
// bn result rounded to T before the add, fn::ReluFn's mask), so fused and
// composed results are equal, bit for bit.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "convert.h"
#include "ddp/core/error.h"
#include "ddp/tensor/functors.h"
#include "kernel_list.h"

namespace ddp::cpu_kernels {

namespace {

struct Layout {
  int64_t n = 1, c = 1, s = 1;  // [N, C, S]
  bool nhwc = false;
};

bool is_nhwc_dense(const Tensor& t) {
  if (t.dim() != 4) return false;
  const int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  const Shape& st = t.strides();
  return (c == 1 || st[1] == 1) && (w == 1 || st[3] == c) && (h == 1 || st[2] == w * c) &&
         (t.size(0) == 1 || st[0] == h * w * c);
}

Layout layout_of(const Tensor& x) {
  Layout l{x.size(0), x.size(1), 1, false};
  for (int64_t i = 2; i < x.dim(); ++i) l.s *= x.size(i);
  l.nhwc = !x.is_contiguous();  // the caller made it NHWC-dense (see in_layout)
  return l;
}

// t in the layout the loops read: itself when it is contiguous or NHWC-dense
// like `like`, else a copy in like's layout.
Tensor in_layout(const Tensor& t, bool nhwc) {
  if (nhwc ? is_nhwc_dense(t) : t.is_contiguous()) return t;
  if (!nhwc) return t.contiguous();
  Tensor out = Tensor::empty({t.size(0), t.size(2), t.size(3), t.size(1)}, TensorOptions(t.dtype()))
                   .permute({0, 3, 1, 2});
  out.copy_(t);
  return out;
}

// Note [Batch-norm sums]
// Each row (one sample's plane of one channel, S elements) is summed in
// kLanes independent accumulators of A, which the compiler turns into SIMD
// adds; the rows' sums are then added in double. An f32 row of a ResNet
// (S <= 1024 for 32x32 images) thus adds about S / 8 values per lane in
// float, far inside the 1e-4 tolerance batch statistics are checked to,
// while the double across rows keeps large batches accurate. One serial
// double accumulator per channel cannot vectorise: it made batch_norm
// about 13% of a resnet20 CPU step.
template <class A, class F>
double lane_sum(int64_t s, F&& f) {
  constexpr int kLanes = 8;
  A acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= s; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += f(i + j);
  double total = 0;
  for (; i < s; ++i) total += double(f(i));
  for (int j = 0; j < kLanes; ++j) total += double(acc[j]);
  return total;
}

constexpr int64_t kRowBlock = 64;  // NHWC rows summed in A before double

// sum0[c] (and sum1[c] when f1 is given) = the sums over channel c's
// elements of f0(c, i) (f1(c, i)), i the element's offset; in double.
template <class A, class F0, class F1>
void channel_sums(const Layout& l, std::vector<double>& sum0, std::vector<double>& sum1, F0&& f0,
                  F1&& f1, bool two) {
  sum0.assign(size_t(l.c), 0.0);
  sum1.assign(size_t(l.c), 0.0);
  if (!l.nhwc) {
    for (int64_t c = 0; c < l.c; ++c)
      for (int64_t n = 0; n < l.n; ++n) {
        const int64_t base = (n * l.c + c) * l.s;
        sum0[c] += lane_sum<A>(l.s, [&](int64_t i) { return f0(c, base + i); });
        if (two) sum1[c] += lane_sum<A>(l.s, [&](int64_t i) { return f1(c, base + i); });
      }
    return;
  }
  const int64_t rows = l.n * l.s;
  std::vector<A> acc0(size_t(l.c)), acc1(size_t(l.c));
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int64_t r1 = std::min(rows, r0 + kRowBlock);
    std::fill(acc0.begin(), acc0.end(), A(0));
    std::fill(acc1.begin(), acc1.end(), A(0));
    A* a0 = acc0.data();
    A* a1 = acc1.data();
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t base = r * l.c;
      for (int64_t c = 0; c < l.c; ++c) a0[c] += f0(c, base + c);
      if (two)
        for (int64_t c = 0; c < l.c; ++c) a1[c] += f1(c, base + c);
    }
    for (int64_t c = 0; c < l.c; ++c) {
      sum0[c] += double(a0[c]);
      sum1[c] += double(a1[c]);
    }
  }
}

// out[i] = store(p[c]·u[i] + q[c]·(v[i] − m[c]) + r[c]) over every element;
// v may be null (then q and m are unused).
template <class T, class A>
void per_channel_affine(const Layout& l, const T* u, const T* v, const std::vector<A>& p,
                        const std::vector<A>& q, const std::vector<A>& m,
                        const std::vector<A>& r, T* out) {
  const A *pp = p.data(), *pq = q.data(), *pm = m.data(), *pr = r.data();
  if (!l.nhwc) {
    for (int64_t n = 0; n < l.n; ++n)
      for (int64_t c = 0; c < l.c; ++c) {
        const int64_t base = (n * l.c + c) * l.s;
        const A a = pp[c], b = pq[c], mc = v ? pm[c] : A(0), d = pr[c];
        if (v) {
          for (int64_t i = 0; i < l.s; ++i)
            out[base + i] = store<T>(a * load(u[base + i]) + b * (load(v[base + i]) - mc) + d);
        } else {
          for (int64_t i = 0; i < l.s; ++i) out[base + i] = store<T>(a * load(u[base + i]) + d);
        }
      }
    return;
  }
  const int64_t rows = l.n * l.s;
  for (int64_t m = 0; m < rows; ++m) {
    const int64_t base = m * l.c;
    if (v) {
      for (int64_t c = 0; c < l.c; ++c)
        out[base + c] =
            store<T>(pp[c] * load(u[base + c]) + pq[c] * (load(v[base + c]) - pm[c]) + pr[c]);
    } else {
      for (int64_t c = 0; c < l.c; ++c)
        out[base + c] = store<T>(pp[c] * load(u[base + c]) + pr[c]);
    }
  }
}

// row(c, base) for every contiguous run of one channel's elements in an NCHW
// layout: elements base .. base + l.s − 1. The fused loops hoist channel c's
// coefficients into locals per run: read through a pointer inside the
// loop, they would be reloaded after every store (the output may alias
// them as far as the compiler knows), which keeps the loop from
// vectorising.
template <class F>
void nchw_rows(const Layout& l, F&& row) {
  for (int64_t n = 0; n < l.n; ++n)
    for (int64_t c = 0; c < l.c; ++c) row(c, (n * l.c + c) * l.s);
}

// f(c, i) for every element i of channel c, in memory order.
template <class F>
void sweep(const Layout& l, F&& f) {
  if (!l.nhwc) {
    for (int64_t n = 0; n < l.n; ++n)
      for (int64_t c = 0; c < l.c; ++c) {
        const int64_t base = (n * l.c + c) * l.s;
        for (int64_t i = 0; i < l.s; ++i) f(c, base + i);
      }
    return;
  }
  const int64_t rows = l.n * l.s;
  for (int64_t m = 0; m < rows; ++m) {
    const int64_t base = m * l.c;
    for (int64_t c = 0; c < l.c; ++c) f(c, base + c);
  }
}

// A [C] tensor (any dtype, or undefined = fill) as a vector of A.
template <class A>
std::vector<A> host_vector(const Tensor& t, int64_t c, A fill) {
  if (!t.defined()) return std::vector<A>(size_t(c), fill);
  Tensor d = t.to(DType::f64).contiguous();
  const double* p = d.data<double>();
  return std::vector<A>(p, p + c);
}
void write_vector(const std::vector<double>& v, const Tensor& out) {
  if (!out.defined()) return;
  Tensor(out).copy_(Tensor::from_vector(v, {int64_t(v.size())}, TensorOptions(DType::f64)));
}

template <class F>
void on_float_dtype(DType dt, F&& fn) {
  switch (dt) {
    case DType::f32: fn.template operator()<float>(); break;
    case DType::f64: fn.template operator()<double>(); break;
    case DType::f16: fn.template operator()<Half>(); break;
    case DType::bf16: fn.template operator()<BFloat16>(); break;
    default:
      DDP_CHECK_T(DTypeError, false, "batch_norm (CPU): expected a floating dtype, got {}",
                  dtype_name(dt));
  }
}

// The output y (or dx) the loops can write: out itself in the loops' layout,
// else a buffer that copy_back() moves into out.
Tensor buffer_for(const Tensor& out, bool nhwc) {
  if (!out.defined() || (nhwc ? is_nhwc_dense(out) : out.is_contiguous())) return out;
  if (!nhwc) return Tensor::empty(out.shape(), TensorOptions(out.dtype()));
  return Tensor::empty({out.size(0), out.size(2), out.size(3), out.size(1)},
                       TensorOptions(out.dtype()))
      .permute({0, 3, 1, 2});
}
void copy_back(const Tensor& buffer, const Tensor& out) {
  if (out.defined() && !buffer.is_same(out)) Tensor(out).copy_(buffer);
}

// The per-channel coefficients of the apply: y = x·scale[c] + shift[c],
// scale = invstd·w, shift = b − mean·scale.
template <class A>
void affine_coefficients(int64_t c, const std::vector<A>& mean, const std::vector<A>& invstd,
                         const Tensor& weight, const Tensor& bias, std::vector<A>& scale,
                         std::vector<A>& shift) {
  std::vector<A> w = host_vector<A>(weight, c, A(1)), b = host_vector<A>(bias, c, A(0));
  scale.resize(size_t(c));
  shift.resize(size_t(c));
  for (int64_t k = 0; k < c; ++k) {
    scale[k] = invstd[k] * w[k];
    shift[k] = b[k] - mean[k] * scale[k];
  }
}

template <class T, class A>
void apply(const Layout& l, const Tensor& x, const std::vector<A>& mean,
           const std::vector<A>& invstd, const Tensor& weight, const Tensor& bias,
           const Tensor& y) {
  std::vector<A> scale, shift;
  affine_coefficients<A>(l.c, mean, invstd, weight, bias, scale, shift);
  Tensor out = buffer_for(y, l.nhwc);
  per_channel_affine<T, A>(l, x.data<T>(), nullptr, scale, scale, scale, shift, out.data<T>());
  copy_back(out, y);
}

// y = relu(round_T(x·scale[c] + shift[c]) + residual); see Note [Fused
// BatchNorm + add + ReLU loops].
template <class T, class A>
void apply_add_relu(const Layout& l, const Tensor& x, const std::vector<A>& mean,
                    const std::vector<A>& invstd, const Tensor& weight, const Tensor& bias,
                    const Tensor& residual, const Tensor& y) {
  std::vector<A> scale, shift;
  affine_coefficients<A>(l.c, mean, invstd, weight, bias, scale, shift);
  Tensor out = buffer_for(y, l.nhwc);
  const A *ps = scale.data(), *pb = shift.data();
  const T* px = x.data<T>();
  T* po = out.data<T>();
  Tensor res = residual.defined() ? in_layout(residual, l.nhwc) : Tensor();
  const T* pr = res.defined() ? res.data<T>() : nullptr;
  // One element: the composed ops' expressions (per_channel_affine's apply,
  // then add, then relu), each rounded to T.
  auto one = [px, pr, po](A a, A d, int64_t i) {
    A v = load(store<T>(a * load(px[i]) + d));
    if (pr) v = load(store<T>(v + load(pr[i])));
    po[i] = store<T>(fn::ReluFn::forward(v));
  };
  if (!l.nhwc)
    nchw_rows(l, [&](int64_t c, int64_t base) {
      const A a = ps[c], d = pb[c];
      if (pr)
        for (int64_t i = base; i < base + l.s; ++i) one(a, d, i);
      else
        for (int64_t i = base; i < base + l.s; ++i)
          po[i] = store<T>(fn::ReluFn::forward(load(store<T>(a * load(px[i]) + d))));
    });
  else
    sweep(l, [&](int64_t c, int64_t i) { one(ps[c], pb[c], i); });
  copy_back(out, y);
}

// Note [Running statistics on the CPU]
// running = (1 − m)·running + m·value per channel, in place, with the
// arithmetic of ddp::update_running_stat (ddp/tensor/running_stats.h: the
// r.mul_(1 − m).add_(value, m) that batch_norm's composite path and
// SyncBatchNorm run) step for step: value cast to running's dtype, 1 − m and m
// rounded to it as scalar operands are, each product and the sum rounded to
// it from its compute type. So the kernel's running statistics equal theirs
// bit for bit, computed here without the ops frontend or autograd (kernels
// stand below both; kernels/kernel_list.h). An undefined running tensor
// (track_running_stats = false) is left alone.
void update_running_stat(const Tensor& running, const std::vector<double>& value,
                         double momentum) {
  if (!running.defined()) return;
  auto blend = [&]<class T>() {
    const compute_t<T> keep = load(cast_to<T>(1.0 - momentum)), take = load(cast_to<T>(momentum));
    T* p = running.data<T>();
    const int64_t stride = running.stride(0);
    for (int64_t c = 0; c < running.size(0); ++c) {
      T& r = p[c * stride];
      const T kept = store<T>(load(r) * keep);
      const T taken = store<T>(load(cast_to<T>(value[size_t(c)])) * take);
      r = store<T>(load(kept) + load(taken));
    }
  };
  on_float_dtype(running.dtype(), blend);
}

// The batch's mean and 1/sqrt(var + eps) per channel, saved into save_mean
// and save_invstd, and the running statistics updated.
template <class T, class A>
void batch_statistics(const Layout& l, const Tensor& x, const Tensor& running_mean,
                      const Tensor& running_var, double momentum, double eps,
                      const Tensor& save_mean, const Tensor& save_invstd, std::vector<A>& mean,
                      std::vector<A>& invstd) {
  const T* px = x.data<T>();
  std::vector<double> sum, unused, sq;
  channel_sums<A>(l, sum, unused, [px](int64_t, int64_t i) { return load(px[i]); },
                  [](int64_t, int64_t) { return A(0); }, false);
  const double count = double(l.n * l.s);
  mean.assign(size_t(l.c), A(0));
  invstd.assign(size_t(l.c), A(1));
  for (int64_t c = 0; c < l.c; ++c) mean[c] = A(sum[c] / count);
  const A* pm = mean.data();
  // Two passes: no cancellation in E[x²] − E[x]².
  channel_sums<A>(
      l, sq, unused,
      [px, pm](int64_t c, int64_t i) {
        const A d = load(px[i]) - pm[c];
        return d * d;
      },
      [](int64_t, int64_t) { return A(0); }, false);
  std::vector<double> var(size_t(l.c)), mean_d(size_t(l.c)), invstd_d(size_t(l.c));
  for (int64_t c = 0; c < l.c; ++c) {
    var[c] = double(A(sq[c] / count));
    invstd[c] = A(1) / std::sqrt(A(var[c]) + A(eps));
    mean_d[c] = double(mean[c]);
    invstd_d[c] = double(invstd[c]);
  }
  write_vector(mean_d, save_mean);
  write_vector(invstd_d, save_invstd);
  const double n = count;
  for (double& v : var) v *= n / (n - 1);  // unbiased
  update_running_stat(running_mean, mean_d, momentum);
  update_running_stat(running_var, var, momentum);
}

// The running mean and 1/sqrt(running_var + eps).
template <class A>
void running_statistics(int64_t c, const Tensor& running_mean, const Tensor& running_var,
                        double eps, std::vector<A>& mean, std::vector<A>& invstd) {
  mean = host_vector<A>(running_mean, c, A(0));
  invstd = host_vector<A>(running_var, c, A(1));
  for (A& v : invstd) v = A(1) / std::sqrt(v + A(eps));
}

bool nhwc_input(const Tensor& x) { return is_nhwc_dense(x) && !x.is_contiguous(); }

void train_forward(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                   const Tensor& running_mean, const Tensor& running_var, double momentum,
                   double eps, const Tensor& y, const Tensor& save_mean,
                   const Tensor& save_invstd) {
  Tensor x = in_layout(x_in, nhwc_input(x_in));
  const Layout l = layout_of(x);
  on_float_dtype(x.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    std::vector<A> mean, invstd;
    batch_statistics<T, A>(l, x, running_mean, running_var, momentum, eps, save_mean,
                           save_invstd, mean, invstd);
    apply<T, A>(l, x, mean, invstd, weight, bias, y);
  });
}

void eval_forward(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, double eps,
                  const Tensor& y) {
  Tensor x = in_layout(x_in, nhwc_input(x_in));
  const Layout l = layout_of(x);
  on_float_dtype(x.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    std::vector<A> mean, invstd;
    running_statistics<A>(l.c, running_mean, running_var, eps, mean, invstd);
    apply<T, A>(l, x, mean, invstd, weight, bias, y);
  });
}

void add_relu_train_forward(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                            const Tensor& running_mean, const Tensor& running_var,
                            const Tensor& residual, double momentum, double eps, const Tensor& y,
                            const Tensor& save_mean, const Tensor& save_invstd) {
  Tensor x = in_layout(x_in, nhwc_input(x_in));
  const Layout l = layout_of(x);
  on_float_dtype(x.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    std::vector<A> mean, invstd;
    batch_statistics<T, A>(l, x, running_mean, running_var, momentum, eps, save_mean,
                           save_invstd, mean, invstd);
    apply_add_relu<T, A>(l, x, mean, invstd, weight, bias, residual, y);
  });
}

void add_relu_eval_forward(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                           const Tensor& running_mean, const Tensor& running_var,
                           const Tensor& residual, double eps, const Tensor& y) {
  Tensor x = in_layout(x_in, nhwc_input(x_in));
  const Layout l = layout_of(x);
  on_float_dtype(x.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    std::vector<A> mean, invstd;
    running_statistics<A>(l.c, running_mean, running_var, eps, mean, invstd);
    apply_add_relu<T, A>(l, x, mean, invstd, weight, bias, residual, y);
  });
}

// The backward of batch_norm, and with y given of batch_norm_add_relu: the
// gradient reaching bn is dz = relu'(y)·dy, computed as dy is read (Note
// [Fused BatchNorm + add + ReLU loops]); dresidual = dz when defined.
// kFused (y given; NHWC only, see add_relu_backward) is a template argument
// so the plain backward's loops carry no mask and no store.
template <bool kFused>
void backward_impl(const Tensor& x_in, const Tensor& y_in, const Tensor& dy_in,
                   const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                   bool batch_stats, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                   const Tensor& dresidual) {
  const bool nhwc = nhwc_input(x_in);
  Tensor x = in_layout(x_in, nhwc);
  Tensor dy = in_layout(dy_in.to(x.dtype()), nhwc);
  Tensor y = y_in.defined() ? in_layout(y_in, nhwc) : Tensor();
  Tensor dz_out = buffer_for(dresidual, nhwc);
  const Layout l = layout_of(x);
  on_float_dtype(x.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    const T *px = x.data<T>(), *pdy = dy.data<T>();
    const T* py = kFused ? y.data<T>() : nullptr;
    T* pdz = kFused ? dz_out.data<T>() : nullptr;
    std::vector<A> mean = host_vector<A>(save_mean, l.c, A(0));
    std::vector<A> invstd = host_vector<A>(save_invstd, l.c, A(1));
    std::vector<A> w = host_vector<A>(weight, l.c, A(1));
    const A* pm = mean.data();
    // dz at element i: dy, masked by the ReLU when fused (relu's backward in
    // the composed ops writes this very value).
    auto dz = [pdy, py](int64_t i) {
      if constexpr (kFused) return fn::ReluFn::backward(load(py[i]), A(0), load(pdy[i]));
      else return load(pdy[i]);
    };
    std::vector<double> sum_dy, sum_dy_xc;  // see Note [Batch-norm sums]
    // Fused: the first sum writes dz into dresidual (always given then: a
    // scratch buffer when the caller does not want it; NHWC: a row's first
    // loop, before its second reads it back), so the second sum and the dx
    // sweep read one stream (dz) instead of two (y, dy), and no loop but the
    // first carries the mask's select (it vectorises there; anywhere else
    // GCC left it a branch per element, which made the fused backward of a
    // resnet20 step slower than the composed ops').
    auto dz_again = [&dz, pdz](int64_t i) {
      if constexpr (kFused) return load(pdz[i]);
      else return dz(i);
    };
    channel_sums<A>(
        l, sum_dy, sum_dy_xc,
        [&dz, pdz](int64_t, int64_t i) {
          const A g = dz(i);
          if constexpr (kFused) pdz[i] = store<T>(g);
          return g;
        },
        [&dz_again, px, pm](int64_t c, int64_t i) { return dz_again(i) * (load(px[i]) - pm[c]); },
        true);
    const double count = double(l.n * l.s);
    std::vector<double> dw(size_t(l.c)), db(size_t(l.c));
    // dx = k·(dz − mean_dz − x̂·mean_dz_x̂) = p·dz + q·(x − mean) + r per channel.
    std::vector<A> p(size_t(l.c)), q(size_t(l.c)), r(size_t(l.c));
    for (int64_t c = 0; c < l.c; ++c) {
      const double sum_dy_xhat = sum_dy_xc[c] * double(invstd[c]);
      dw[c] = sum_dy_xhat;
      db[c] = sum_dy[c];
      const A k = invstd[c] * w[c];
      const A mean_dy = batch_stats ? A(sum_dy[c] / count) : A(0);
      const A mean_dy_xhat = batch_stats ? A(sum_dy_xhat / count) : A(0);
      p[c] = k;
      q[c] = -k * invstd[c] * mean_dy_xhat;
      r[c] = -k * mean_dy;
    }
    write_vector(dw, dweight);
    write_vector(db, dbias);
    Tensor out = buffer_for(dx, nhwc);
    T* po = out.defined() ? out.data<T>() : nullptr;
    if constexpr (kFused) {  // NHWC: add_relu_backward takes NCHW another way
      copy_back(dz_out, dresidual);
      if (po) per_channel_affine<T, A>(l, pdz, px, p, q, mean, r, po);  // dz as the sums wrote it
    } else if (po) {
      per_channel_affine<T, A>(l, pdy, px, p, q, mean, r, po);
    }
    if (po) copy_back(out, dx);
  });
}

void backward_kernel(const Tensor& x, const Tensor& dy, const Tensor& weight,
                     const Tensor& save_mean, const Tensor& save_invstd, bool batch_stats,
                     double /*eps: folded into save_invstd*/, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias) {
  backward_impl<false>(x, Tensor(), dy, weight, save_mean, save_invstd, batch_stats, dx, dweight, dbias,
                Tensor());
}

void add_relu_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& weight,
                       const Tensor& save_mean, const Tensor& save_invstd, bool batch_stats,
                       double /*eps: folded into save_invstd*/, const Tensor& dx,
                       const Tensor& dweight, const Tensor& dbias, const Tensor& dresidual) {
  if (!nhwc_input(x)) {
    // NCHW: the mask as a pass of its own, then the plain backward. Inside
    // the NCHW sums (eight lanes per row, Note [Batch-norm sums]) the select
    // does not vectorise and branches on every element, which made the
    // fused backward twice as slow as the composed one; the NHWC sums
    // (one loop over the channels) vectorise it.
    Tensor dz = dresidual.defined() && dresidual.is_contiguous()
                    ? dresidual
                    : Tensor::empty(x.shape(), TensorOptions(x.dtype()));
    Tensor yc = y.contiguous(), dyc = dy.to(x.dtype()).contiguous();
    on_float_dtype(x.dtype(), [&]<class T>() {
      using A = compute_t<T>;
      const T *py = yc.data<T>(), *pdy = dyc.data<T>();
      T* pdz = dz.data<T>();
      const int64_t n = x.numel();
      for (int64_t i = 0; i < n; ++i)
        pdz[i] = store<T>(fn::ReluFn::backward(load(py[i]), A(0), load(pdy[i])));
    });
    copy_back(dz, dresidual);
    backward_impl<false>(x, Tensor(), dz, weight, save_mean, save_invstd, batch_stats, dx, dweight,
                         dbias, Tensor());
    return;
  }
  if (!dresidual.defined()) {  // scratch for dz (see backward_impl)
    const Tensor dz = Tensor::empty({x.size(0), x.size(2), x.size(3), x.size(1)},
                                    TensorOptions(x.dtype()))
                          .permute({0, 3, 1, 2});
    backward_impl<true>(x, y, dy, weight, save_mean, save_invstd, batch_stats, dx, dweight, dbias,
                        dz);
    return;
  }
  backward_impl<true>(x, y, dy, weight, save_mean, save_invstd, batch_stats, dx, dweight, dbias,
                dresidual);
}

}  // namespace

DDP_REGISTER_KERNEL(batch_norm_train_forward, CPU, train_forward)
DDP_REGISTER_KERNEL(batch_norm_eval_forward, CPU, eval_forward)
DDP_REGISTER_KERNEL(batch_norm_backward, CPU, backward_kernel)
DDP_REGISTER_KERNEL(batch_norm_add_relu_train_forward, CPU, add_relu_train_forward)
DDP_REGISTER_KERNEL(batch_norm_add_relu_eval_forward, CPU, add_relu_eval_forward)
DDP_REGISTER_KERNEL(batch_norm_add_relu_backward, CPU, add_relu_backward)

}  // namespace ddp::cpu_kernels
