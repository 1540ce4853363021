// cross_entropy (forward and backward side by side) and mse_loss.
//
// Note [Fused cross entropy]
// Per row i of the logits x (as [n, C]), with target t_i, ε the label
// smoothing and valid_i = (t_i != ignore_index):
//   lse_i  = log Σ_c exp(x_ic)
//   loss_i = valid_i · ((1-ε)·(lse_i - x_{i,t_i}) + ε·(lse_i - Σ_c x_ic / C))
// which is -Σ_c q_c · log_softmax(x)_c for the target distribution
// q = (1-ε)·one_hot(t_i) + ε/C. The kernel cross_entropy_forward computes
// loss_i and lse_i in one pass over each row (in f32, or f64 for f64,
// reading f16/bf16 logits directly); the reduction is then a sum (divided,
// for "mean", by the number of valid rows) in tensor ops. Backward is the
// closed form
//   dx_ic = (exp(x_ic - lse_i) - (1-ε)·[c = t_i] - ε/C) · valid_i · s_i,
// with s_i the incoming gradient (of loss_i for "none", of the total for
// "sum") divided, for "mean", by the number of valid rows: one pass of
// cross_entropy_backward. Only lse ([n] floats) is saved besides the logits
// the caller holds anyway, not the [n, C] log-probabilities. Nothing reads
// the device from the host: a target out of range raises at once on the CPU
// and at the next synchronisation on CUDA (Note [Deferred device errors] in
// src/tensor/device_error_cuda.cpp).

#include "ddp/nn/functional/loss.h"

#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/autograd/node.h"
#include "ddp/tensor/ops.h"
#include "kernel_list.h"
#include "nn/functional/checks.h"
#include "tensor/autocast_policy.h"

namespace ddp::nn::functional {

namespace {

// logits viewed as [rows, C] with the class dim last (a permuted copy for
// [N, C, d...]), and how to undo it for a gradient of that layout.
struct ClassRows {
  Tensor rows2d;
  Shape moved_shape;             // logits' shape with the class dim moved last
  std::vector<int64_t> inverse;  // permutation back to logits' layout (empty: none)
};

ClassRows to_class_rows(const Tensor& x) {
  ClassRows r;
  const int64_t C = x.dim() == 1 ? x.size(0) : x.size(1);
  if (x.dim() <= 2) {
    r.rows2d = x.reshape({-1, C});
    r.moved_shape = x.shape();
    return r;
  }
  std::vector<int64_t> perm{0};
  for (int64_t d = 2; d < x.dim(); ++d) perm.push_back(d);
  perm.push_back(1);
  Tensor moved = x.permute(perm);
  r.moved_shape = moved.shape();
  r.rows2d = moved.contiguous().view({-1, C});
  r.inverse.assign(perm.size(), 0);
  for (size_t i = 0; i < perm.size(); ++i) r.inverse[size_t(perm[i])] = int64_t(i);
  return r;
}

void check_cross_entropy(const Tensor& x, const Tensor& t, double eps) {
  const char* op = "cross_entropy";
  detail::check_floating(op, x, "logits");
  detail::check_defined(op, t, "target");
  DDP_CHECK_T(DTypeError, t.dtype() == DType::i64,
              "{}: target must hold class indices as i64, got {}", op, t.describe());
  DDP_CHECK_T(DeviceError, t.device() == x.device(),
              "{}: logits {} and target {} are on different devices", op, x.describe(),
              t.describe());
  DDP_CHECK(eps >= 0.0 && eps <= 1.0, "{}: label_smoothing must be in [0, 1], got {}", op, eps);
  // The target's shape is the logits' without the class dim (dim 1, or dim 0 of a 1-D input).
  DDP_CHECK_T(ShapeError, x.dim() >= 1, "{}: logits must have a class dim, got {}", op,
              x.describe());
  const int64_t C = x.dim() == 1 ? x.size(0) : x.size(1);
  DDP_CHECK_T(ShapeError, C >= 1, "{}: logits {} have no classes", op, x.describe());
  Shape expected = x.shape();
  expected.erase(expected.begin() + (x.dim() == 1 ? 0 : 1));
  DDP_CHECK_T(ShapeError, t.shape() == expected, "{}: logits {} need a target of shape {}, got {}",
              op, x.describe(), shape_str(expected), t.describe());
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     double label_smoothing, int64_t ignore_index) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(
        amp::detail::AutocastOp::cross_entropy, {logits}, [&](const Tensors& t) {
          return cross_entropy(t[0], target, reduction, label_smoothing, ignore_index);
        });
  const char* op = "cross_entropy";
  check_cross_entropy(logits, target, label_smoothing);
  const double eps = label_smoothing;
  const DType work = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const TensorOptions work_opts = TensorOptions(work).device(logits.device());

  ClassRows rows = to_class_rows(logits.detach());
  Tensor x = rows.rows2d.contiguous();
  const int64_t n = x.size(0);
  Tensor t = target.detach().contiguous().reshape({n});
  Tensor per_row = Tensor::empty({n}, work_opts);
  Tensor lse = Tensor::empty({n}, work_opts);
  if (n > 0)
    kernels::call<kernels::cross_entropy_forward>(x.device(), x, t, ignore_index, eps, per_row,
                                                  lse);
  Tensor loss, count;
  {
    NoGradGuard no_grad;
    switch (reduction) {
      case Reduction::none:
        loss = per_row.reshape(target.shape());
        break;
      case Reduction::sum:
        loss = sum(per_row);
        break;
      case Reduction::mean:
        count = sum(ne(t, double(ignore_index)).to(work));
        loss = sum(per_row) / count;
        break;
    }
    loss = loss.to(logits.dtype());
  }

  if (autograd::needs_grad({logits})) {
    const DType out_dtype = logits.dtype();
    const Shape moved_shape = rows.moved_shape;
    const std::vector<int64_t> inverse = rows.inverse;
    autograd::record(
        op, {logits}, {loss},
        [x, t, lse, count, reduction, eps, ignore_index, work, out_dtype, moved_shape,
         inverse](const Tensors& g) -> Tensors {
          const int64_t n = x.size(0);
          // s_i of Note [Fused cross entropy]; the kernel applies valid_i.
          Tensor s = g[0].detach().to(work);
          if (reduction == Reduction::mean) s = s / count;
          s = (reduction == Reduction::none ? s.reshape({n}) : s.reshape({1}).expand({n}))
                  .contiguous();
          Tensor dx = Tensor::empty(x.shape(), TensorOptions(out_dtype).device(x.device()));
          if (n > 0)
            kernels::call<kernels::cross_entropy_backward>(x.device(), x, t, lse, s, ignore_index,
                                                           eps, dx);
          dx = dx.view(moved_shape);
          if (!inverse.empty()) dx = dx.permute(inverse).contiguous();
          return {dx};
        });
  }
  return loss;
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(
        amp::detail::AutocastOp::mse_loss, {input, target},
        [reduction](const Tensors& t) { return mse_loss(t[0], t[1], reduction); });
  const char* op = "mse_loss";
  detail::check_floating(op, input, "input");
  detail::check_defined(op, target, "target");
  detail::check_like(op, target, "target", input);
  DDP_CHECK_T(ShapeError, input.shape() == target.shape(),
              "{}: input {} and target {} must have the same shape", op, input.describe(),
              target.describe());
  Tensor d = input - target;
  Tensor sq = d * d;
  switch (reduction) {
    case Reduction::none:
      return sq;
    case Reduction::sum:
      return sum(sq);
    case Reduction::mean:
      break;
  }
  return mean(sq);
}

}  // namespace ddp::nn::functional
