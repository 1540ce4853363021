// batch_norm: checks, the kernel calls with the backward, and the composite
// for a device without batch-norm kernels; see Note [BatchNorm backends] in
// include/ddp/nn/functional/batch_norm.h.

#include "ddp/nn/functional/batch_norm.h"

#include <atomic>
#include <cstdlib>

#include "tensor/autocast_policy.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/autograd/node.h"
#include "ddp/core/error.h"
#include "ddp/nn/functional/batch_norm_detail.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/layout_conversions.h"
#include "ddp/tensor/ops.h"
#include "ddp/tensor/running_stats.h"
#include "kernel_list.h"

namespace ddp::nn::functional {

namespace batch_norm_detail {

void check_args(const std::string& who, const Tensor& x, const Tensors& per_channel) {
  DDP_CHECK(x.defined(), "{}: undefined input", who);
  DDP_CHECK_T(ShapeError, x.dim() >= 2, "{}: expected an input [N, C, ...], got {}", who,
              x.describe());
  DDP_CHECK_T(DTypeError, is_floating(x.dtype()), "{}: expected a floating input, got {}", who,
              x.describe());
  for (const Tensor& t : per_channel) {
    if (!t.defined()) continue;
    DDP_CHECK_T(ShapeError, t.dim() == 1 && t.size(0) == x.size(1),
                "{}: per-channel tensors must be [{}] for input {}, got {}", who, x.size(1),
                x.describe(), t.describe());
    DDP_CHECK_T(DeviceError, t.device() == x.device(), "{}: {} is not on the input's device ({})",
                who, t.describe(), x.device().str());
  }
}


Tensor per_channel(const Tensor& t, int64_t rank) {
  Shape s(size_t(rank), 1);
  s[1] = t.size(0);
  return t.view(s);
}

bool autocast_active() { return amp::detail::autocast_active(); }

Tensor autocast_call(const Tensors& x_weight_bias,
                     const std::function<Tensor(const Tensors&)>& fn) {
  return amp::detail::autocast_call(amp::detail::AutocastOp::batch_norm, x_weight_bias, fn);
}

}  // namespace batch_norm_detail

namespace {

using batch_norm_detail::check_args;
using batch_norm_detail::per_channel;

Tensor batch_norm_composite(const Tensor& x, const Tensor& rm, const Tensor& rv, const Tensor& w,
                            const Tensor& b, bool batch_stats, double momentum, double eps) {
  const int64_t rank = x.dim();
  std::vector<int64_t> dims{0};
  for (int64_t i = 2; i < rank; ++i) dims.push_back(i);
  Tensor m, v;
  if (batch_stats) {
    m = mean(x, dims, true);
    v = var(x, dims, 0, true);
    const double n = double(x.numel() / x.size(1));
    update_running_stat(rm, m.flatten(), momentum);
    update_running_stat(rv, v.detach().flatten() * (n / (n - 1)), momentum);
  } else {
    m = per_channel(rm, rank);
    v = per_channel(rv, rank);
  }
  Tensor y = (x - m) * rsqrt(v + eps);
  if (w.defined()) y = y * per_channel(w, rank);
  if (b.defined()) y = y + per_channel(b, rank);
  return y;
}

// The fused op composed: what batch_norm_add_relu computes, and how it runs
// where no fused kernel is registered or the residual's dtype differs from
// x's (then the add promotes, as the composed ops do).
Tensor batch_norm_add_relu_composed(const Tensor& x, const Tensor& rm, const Tensor& rv,
                                    const Tensor& w, const Tensor& b, const Tensor& residual,
                                    bool batch_stats, double momentum, double eps,
                                    const std::string& who) {
  Tensor y = batch_norm(x, rm, rv, w, b, batch_stats, momentum, eps, who);
  return ::ddp::relu(residual.defined() ? add(y, residual) : y);
}

// The kernels of x's device (kernels/kernel_list.h) and the backward: the
// batch_norm kernels, or with `fused` the batch_norm_add_relu ones (residual
// undefined or like x). The kernels see x detached, contiguous or (4-D)
// NHWC, and write y in x's layout.
Tensor batch_norm_kernels(const Tensor& x, const Tensor& rm, const Tensor& rv,
                          const Tensor& weight, const Tensor& bias, const Tensor& residual,
                          bool fused, bool batch_stats, double momentum, double eps) {
  const Device dev = x.device();
  const int64_t c = x.size(1);
  const bool channels_last = is_channels_last(x);
  // x, dy and the residual in x's layout (Note [Layout conversion count]).
  auto has_x_layout = [channels_last](const Tensor& t) {
    return channels_last ? is_channels_last(t) : t.is_contiguous();
  };
  auto in_x_layout = [channels_last, has_x_layout](const Tensor& t) {
    if (has_x_layout(t)) return t;
    detail::count_layout_conversion();
    return channels_last ? to_channels_last(t) : t.contiguous();
  };
  Tensor xk = channels_last ? x.detach() : in_x_layout(x.detach());
  Tensor rk = residual.defined() ? in_x_layout(residual.detach()) : Tensor();
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  // A fresh tensor in x's shape and layout (captured by value: the backward keeps it).
  auto like_x = [shape = xk.shape(), dev, channels_last](DType dt) {
    return shape.size() == 4 ? empty_nchw(shape, dt, dev, channels_last)
                             : Tensor::empty(shape, TensorOptions(dt).device(dev));
  };
  Tensor y = like_x(x.dtype());
  const TensorOptions sopts =
      TensorOptions(x.dtype() == DType::f64 ? DType::f64 : DType::f32).device(dev);
  Tensor save_mean, save_invstd;
  if (batch_stats) {
    save_mean = Tensor::empty({c}, sopts);
    save_invstd = Tensor::empty({c}, sopts);
    if (fused)
      kernels::call<kernels::batch_norm_add_relu_train_forward>(
          dev, xk, w, b, rm, rv, rk, momentum, eps, y, save_mean, save_invstd);
    else
      kernels::call<kernels::batch_norm_train_forward>(dev, xk, w, b, rm, rv, momentum, eps, y,
                                                       save_mean, save_invstd);
  } else if (fused) {
    kernels::call<kernels::batch_norm_add_relu_eval_forward>(dev, xk, w, b, rm, rv, rk, eps, y);
  } else {
    kernels::call<kernels::batch_norm_eval_forward>(dev, xk, w, b, rm, rv, eps, y);
  }

  if (autograd::needs_grad({x, weight, bias, residual})) {
    if (!batch_stats) {  // the statistics the backward divides by
      autograd::NoGradGuard no_grad;
      save_mean = rm.detach().to(sopts.dtype_).contiguous();
      save_invstd = rsqrt(rv.detach().to(sopts.dtype_) + eps).contiguous();
    }
    const bool need_dx = autograd::needs_grad({x}), need_dr = autograd::needs_grad({residual});
    const bool need_dw = autograd::needs_grad({weight}), need_db = autograd::needs_grad({bias});
    const DType wdt = weight.defined() ? weight.dtype() : x.dtype();
    const DType bdt = bias.defined() ? bias.dtype() : x.dtype();
    // The fused backward masks with the output (Note [Output-only
    // derivatives] in src/ops/elementwise.cpp: relu's mask is y > 0).
    const Tensor ys = fused ? y.detach() : Tensor();
    autograd::record(fused ? "batch_norm_add_relu" : "batch_norm", {x, weight, bias, residual},
                     {y},
                     [xk, ys, w, save_mean, save_invstd, batch_stats, eps, fused, need_dx,
                      need_dw, need_db, need_dr, wdt, bdt, like_x, in_x_layout,
                      has_x_layout](const Tensors& g) -> Tensors {
                       const Device dev = xk.device();
                       Tensor dy = g[0].detach().to(xk.dtype());
                       TensorOptions o = TensorOptions(xk.dtype()).device(dev);
                       Tensor dx = need_dx ? like_x(xk.dtype()) : Tensor();
                       Tensor dw = need_dw ? Tensor::empty({xk.size(1)}, o.dtype(wdt)) : Tensor();
                       Tensor db = need_db ? Tensor::empty({xk.size(1)}, o.dtype(bdt)) : Tensor();
                       if (fused && !has_x_layout(dy)) {
                         // Note [Fused backward of a strided gradient]
                         // A gradient in another layout (the broadcast one of
                         // a global average pool after the last block) is
                         // masked by a tensor op, whose result takes y's
                         // layout (Note [Memory-format propagation]), instead
                         // of being copied into x's layout and then masked:
                         // the same single pass the composed relu makes, and
                         // no layout conversion.
                         Tensor dz = where(gt(ys, 0.0), dy, Tensor::zeros({}, o));
                         dz = in_x_layout(dz);
                         kernels::call<kernels::batch_norm_backward>(
                             dev, xk, dz, w, save_mean, save_invstd, batch_stats, eps, dx, dw, db);
                         return {dx, dw, db, need_dr ? dz : Tensor()};
                       }
                       dy = in_x_layout(dy);
                       Tensor dr = need_dr ? like_x(xk.dtype()) : Tensor();
                       if (fused)
                         kernels::call<kernels::batch_norm_add_relu_backward>(
                             dev, xk, ys, dy, w, save_mean, save_invstd, batch_stats, eps, dx, dw,
                             db, dr);
                       else
                         kernels::call<kernels::batch_norm_backward>(
                             dev, xk, dy, w, save_mean, save_invstd, batch_stats, eps, dx, dw, db);
                       return {dx, dw, db, dr};
                     });
  }
  return y;
}

// batch_norm's argument checks, shared by the fused op.
void check_batch_norm_args(const std::string& who, const Tensor& x, const Tensor& running_mean,
                           const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                           bool use_batch_stats) {
  check_args(who, x, {running_mean, running_var, weight, bias});
  DDP_CHECK(use_batch_stats || (running_mean.defined() && running_var.defined()),
            "{}: running statistics are needed when not using batch statistics", who);
  DDP_CHECK(!use_batch_stats || x.numel() / x.size(1) > 1,
            "{}: expected more than 1 value per channel when training, got input {}", who,
            x.describe());
}

// On unless the environment says DDP_BATCH_NORM_FUSION=0 (so a benchmark
// binary can compare both without a flag of its own).
bool fusion_default() {
  const char* v = std::getenv("DDP_BATCH_NORM_FUSION");
  return v == nullptr || std::string(v) != "0";
}
std::atomic<bool> g_fusion_enabled{fusion_default()};

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool use_batch_stats, double momentum,
                  double eps, const std::string& who_in) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]; running stats stay as they are
    return amp::detail::autocast_call(
        amp::detail::AutocastOp::batch_norm, {x, weight, bias}, [&](const Tensors& t) {
          return batch_norm(t[0], running_mean, running_var, t[1], t[2], use_batch_stats, momentum,
                            eps, who_in);
        });
  const std::string who = who_in.empty() ? "batch_norm" : who_in;
  check_batch_norm_args(who, x, running_mean, running_var, weight, bias, use_batch_stats);
  // A device without batch-norm kernels (CUDA built without cuDNN) composes tensor ops.
  if (!kernels::has_kernel<kernels::batch_norm_train_forward>(x.device().type))
    return batch_norm_composite(x, running_mean, running_var, weight, bias, use_batch_stats,
                                momentum, eps);
  return batch_norm_kernels(x, running_mean, running_var, weight, bias, Tensor(), false,
                            use_batch_stats, momentum, eps);
}

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                           const Tensor& weight, const Tensor& bias, const Tensor& residual,
                           bool use_batch_stats, double momentum, double eps,
                           const std::string& who_in) {
  // batch_norm's policy for x and the parameters; the residual is not cast,
  // as the composed add would not cast it (Note [BatchNorm + add + ReLU fusion]).
  if (amp::detail::autocast_active())
    return amp::detail::autocast_call(
        amp::detail::AutocastOp::batch_norm, {x, weight, bias}, [&](const Tensors& t) {
          return batch_norm_add_relu(t[0], running_mean, running_var, t[1], t[2], residual,
                                     use_batch_stats, momentum, eps, who_in);
        });
  const std::string who = who_in.empty() ? "batch_norm_add_relu" : who_in;
  check_batch_norm_args(who, x, running_mean, running_var, weight, bias, use_batch_stats);
  if (residual.defined()) {
    DDP_CHECK_T(ShapeError, residual.shape() == x.shape(),
                "{}: the residual must have the input's shape {}, got {}", who,
                shape_str(x.shape()), residual.describe());
    DDP_CHECK_T(DeviceError, residual.device() == x.device(),
                "{}: the residual {} is not on the input's device ({})", who, residual.describe(),
                x.device().str());
  }
  const bool promotes = residual.defined() && residual.dtype() != x.dtype();
  if (promotes || !kernels::has_kernel<kernels::batch_norm_add_relu_train_forward>(x.device().type))
    return batch_norm_add_relu_composed(x, running_mean, running_var, weight, bias, residual,
                                        use_batch_stats, momentum, eps, who);
  return batch_norm_kernels(x, running_mean, running_var, weight, bias, residual, true,
                            use_batch_stats, momentum, eps);
}

void set_batch_norm_fusion_enabled(bool enabled) { g_fusion_enabled.store(enabled); }
bool batch_norm_fusion_enabled() { return g_fusion_enabled.load(); }

}  // namespace ddp::nn::functional
