// batch_norm: checks, the CPU kernels with their backward, and the CUDA
// composite; see Note [BatchNorm backends] in
// include/ddp/nn/functional/batch_norm.h.

#include "ddp/nn/functional/batch_norm.h"

#include "amp/autocast_policy.h"
#include "cpu/batch_norm.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/autograd/node.h"
#include "ddp/core/error.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/tensor/ops.h"
#include "nn/functional/batch_norm_backend.h"

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

void update_running(const Tensor& running, const Tensor& value, double momentum) {
  if (!running.defined()) return;
  autograd::NoGradGuard no_grad;
  Tensor r = running;
  r.mul_(1.0 - momentum).add_(value.detach().to(running.dtype()), momentum);
}

Tensor per_channel(const Tensor& t, int64_t rank) {
  Shape s(size_t(rank), 1);
  s[1] = t.size(0);
  return t.view(s);
}

}  // namespace batch_norm_detail

namespace {

using batch_norm_detail::check_args;
using batch_norm_detail::per_channel;
using batch_norm_detail::update_running;

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
    update_running(rm, m.flatten(), momentum);
    update_running(rv, v.detach().flatten() * (n / (n - 1)), momentum);
  } else {
    m = per_channel(rm, rank);
    v = per_channel(rv, rank);
  }
  Tensor y = (x - m) * rsqrt(v + eps);
  if (w.defined()) y = y * per_channel(w, rank);
  if (b.defined()) y = y + per_channel(b, rank);
  return y;
}

Tensor batch_norm_cpu(const std::string& who, const Tensor& x, const Tensor& rm, const Tensor& rv,
                      const Tensor& weight, const Tensor& bias, bool batch_stats, double momentum,
                      double eps) {
  const DType dt = x.dtype();
  const int64_t c = x.size(1);
  TensorOptions opts(dt);
  Tensor xc = x.detach().contiguous();
  Tensor mean_c, invstd;
  if (batch_stats) {
    mean_c = Tensor::empty({c}, opts);
    Tensor var_c = Tensor::empty({c}, opts);
    cpu_kernels::batch_norm_stats(xc, mean_c, var_c);
    const double n = double(x.numel() / c);
    update_running(rm, mean_c, momentum);
    update_running(rv, var_c * (n / (n - 1)), momentum);
    invstd = rsqrt(var_c + eps);
  } else {
    mean_c = rm.detach().to(dt).contiguous();
    invstd = rsqrt(rv.detach().to(dt) + eps).contiguous();
  }
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor y = Tensor::empty(x.shape(), opts);
  cpu_kernels::batch_norm_apply(xc, mean_c, invstd, w, b, y);
  const bool channels_last = is_channels_last(x);
  if (channels_last) y = to_channels_last(y);  // the output keeps the input's layout

  if (autograd::needs_grad({x, weight, bias})) {
    const bool need_dx = autograd::needs_grad({x});
    const bool need_dw = autograd::needs_grad({weight}), need_db = autograd::needs_grad({bias});
    autograd::record("batch_norm", {x, weight, bias}, {y},
                     [xc, mean_c, invstd, w, batch_stats, channels_last, need_dx, need_dw,
                      need_db](const Tensors& g) -> Tensors {
                       Tensor dy = g[0].detach().contiguous();
                       TensorOptions o(xc.dtype());
                       Tensor dx = need_dx ? Tensor::empty(xc.shape(), o) : Tensor();
                       Tensor dw = need_dw ? Tensor::empty({xc.size(1)}, o) : Tensor();
                       Tensor db = need_db ? Tensor::empty({xc.size(1)}, o) : Tensor();
                       cpu_kernels::batch_norm_backward(xc, dy, mean_c, invstd, w, batch_stats, dx,
                                                        dw, db);
                       if (dx.defined() && channels_last) dx = to_channels_last(dx);
                       return {dx, dw, db};
                     });
  }
  return y;
}

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
  check_args(who, x, {running_mean, running_var, weight, bias});
  DDP_CHECK(use_batch_stats || (running_mean.defined() && running_var.defined()),
            "{}: running statistics are needed when not using batch statistics", who);
  DDP_CHECK(!use_batch_stats || x.numel() / x.size(1) > 1,
            "{}: expected more than 1 value per channel when training, got input {}", who,
            x.describe());
  if (x.is_cuda() && use_batch_stats && x.dim() == 4 && batch_norm_detail::have_cudnn())
    return batch_norm_detail::batch_norm_train_cudnn(x, running_mean, running_var, weight, bias,
                                                     momentum, eps);
  if (x.is_cuda())
    return batch_norm_composite(x, running_mean, running_var, weight, bias, use_batch_stats,
                                momentum, eps);
  if (x.dtype() == DType::f16 || x.dtype() == DType::bf16) {
    // CPU half precision runs in f32 (Note [BatchNorm backends]).
    auto f32 = [](const Tensor& t) { return t.defined() ? t.to(DType::f32) : t; };
    return batch_norm_cpu(who, x.to(DType::f32), running_mean, running_var, f32(weight), f32(bias),
                          use_batch_stats, momentum, eps)
        .to(x.dtype());
  }
  return batch_norm_cpu(who, x, running_mean, running_var, weight, bias, use_batch_stats, momentum,
                        eps);
}

}  // namespace ddp::nn::functional
