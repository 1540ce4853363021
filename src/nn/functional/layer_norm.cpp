// layer_norm: forward and backward side by side; the kernels are in
// kernels/cpu/layer_norm.cpp and kernels/cuda/layer_norm.cu.

#include "ddp/nn/functional/layer_norm.h"

#include "tensor/autocast_policy.h"
#include "ddp/autograd/node.h"
#include "nn/functional/checks.h"
#include "kernel_list.h"

namespace ddp::nn::functional {


Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(
        amp::detail::AutocastOp::layer_norm, {x, weight, bias},
        [&](const Tensors& t) { return layer_norm(t[0], normalized_shape, t[1], t[2], eps); });
  const char* op = "layer_norm";
  detail::check_floating(op, x, "input");
  detail::check_like(op, weight, "weight", x);
  detail::check_like(op, bias, "bias", x);
  const int64_t k = int64_t(normalized_shape.size());
  DDP_CHECK_T(ShapeError, k >= 1, "{}: normalized_shape must have at least one dim", op);
  bool ok = x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(x.dim() - k + i) == normalized_shape[size_t(i)];
  DDP_CHECK_T(ShapeError, ok, "{}: expected an input whose last dims are {}, got {}", op,
              shape_str(normalized_shape), x.describe());
  for (const Tensor* p : {&weight, &bias})
    DDP_CHECK_T(ShapeError, !p->defined() || p->shape() == normalized_shape,
                "{}: weight and bias must have shape {}, got {}", op, shape_str(normalized_shape),
                p->describe());

  const int64_t cols = shape_numel(normalized_shape);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const TensorOptions opts = TensorOptions(x.dtype()).device(x.device());
  const TensorOptions stat_opts =
      TensorOptions(x.dtype() == DType::f64 ? DType::f64 : DType::f32).device(x.device());
  // Kernels run on detached contiguous [rows, cols] copies; the one node
  // recorded below is against the caller's tensors.
  Tensor x2 = x.detach().contiguous().view({rows, cols});
  Tensor w = weight.defined() ? weight.detach().contiguous().view({cols}) : Tensor();
  Tensor b = bias.defined() ? bias.detach().contiguous().view({cols}) : Tensor();
  Tensor y = Tensor::empty({rows, cols}, opts);
  Tensor mean = Tensor::empty({rows}, stat_opts);
  Tensor rstd = Tensor::empty({rows}, stat_opts);
  kernels::call<kernels::layer_norm_forward>(x.device(), x2, w, b, eps, y, mean, rstd);
  Tensor out = y.view(x.shape());

  if (autograd::needs_grad({x, weight, bias})) {
    const Shape xs = x.shape();
    const bool has_w = weight.defined(), has_b = bias.defined();
    autograd::record(op, {x, weight, bias}, {out}, [=](const Tensors& g) -> Tensors {
      Tensor dy = g[0].to(x2.dtype()).contiguous().view({rows, cols});
      Tensor dx = Tensor::empty({rows, cols}, opts);
      Tensor dw = has_w ? Tensor::empty({cols}, opts) : Tensor();
      Tensor db = has_b ? Tensor::empty({cols}, opts) : Tensor();
      kernels::call<kernels::layer_norm_backward>(x2.device(), dy, x2, w, mean, rstd, dx, dw, db);
      return {dx.view(xs), has_w ? dw.view(normalized_shape) : Tensor(),
              has_b ? db.view(normalized_shape) : Tensor()};
    });
  }
  return out;
}

}  // namespace ddp::nn::functional
