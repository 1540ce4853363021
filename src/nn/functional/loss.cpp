// cross_entropy (forward and backward side by side) and mse_loss.
//
// Note [Fused cross entropy]
// Forward computes z = log_softmax(x) once per row (the softmax row kernel,
// in f32, or f64 for f64) and
//   loss_i = valid_i · ((1-ε)·(-z[t_i]) + ε·(-Σ_c z_c / C)),
// where valid_i = (t_i != ignore_index). Backward does not go through the
// graph of those steps; it is the closed form
//   dx_i = (exp(z_i) - ((1-ε)·one_hot(t_i) + ε/C)) · valid_i · s_i,
// with s_i = the incoming gradient (of loss_i for "none", of the total for
// "sum") divided, for "mean", by the number of valid rows. Only z is saved.
// The steps are tensor ops run without recording, so CPU and CUDA share
// this code; the only host synchronisation is the range check of the
// targets in forward (two one-element reads).

#include "ddp/nn/functional/loss.h"

#include <vector>

#include "tensor/autocast_policy.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/autograd/node.h"
#include "ddp/tensor/ops.h"
#include "nn/functional/checks.h"

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
  const int64_t C = logits.dim() == 1 ? logits.size(0) : logits.size(1);
  const double eps = label_smoothing;
  const DType work = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;

  Tensor loss, z, valid, safe, count;
  ClassRows rows;
  {
    NoGradGuard no_grad;
    rows = to_class_rows(logits.detach().to(work));
    const int64_t n = rows.rows2d.size(0);
    Tensor t = target.detach().reshape({n});
    Tensor valid_mask = ne(t, double(ignore_index));
    safe = where(valid_mask, t, zeros_like(t));  // ignored rows read class 0, then count 0
    if (n > 0) {
      const int64_t lo = ddp::min(safe).item<int64_t>(), hi = ddp::max(safe).item<int64_t>();
      DDP_CHECK_T(IndexError, lo >= 0 && hi < C,
                  "{}: target values must be in [0, {}) or ignore_index ({}); got values in "
                  "[{}, {}]",
                  op, C, ignore_index, lo, hi);
    }
    valid = valid_mask.to(work);
    z = log_softmax(rows.rows2d, -1);
    Tensor nll = -gather(z, 1, safe.reshape({n, 1})).reshape({n});
    Tensor per_row = nll * (1.0 - eps);
    if (eps > 0.0) per_row = per_row + sum(z, {1}) * (-eps / double(C));
    per_row = per_row * valid;
    switch (reduction) {
      case Reduction::none:
        loss = per_row.reshape(target.shape());
        break;
      case Reduction::sum:
        loss = sum(per_row);
        break;
      case Reduction::mean:
        count = sum(valid);
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
        [z, valid, safe, count, reduction, eps, C, work, out_dtype, moved_shape,
         inverse](const Tensors& g) -> Tensors {
          const int64_t n = z.size(0);
          // s_i of Note [Fused cross entropy], as [n, 1].
          Tensor s = g[0].to(work);
          if (reduction == Reduction::mean) s = s / count;
          s = (reduction == Reduction::none ? s.reshape({n}) * valid : s * valid).reshape({n, 1});
          // (1-ε)·one_hot(t) as a comparison with the class ids: no index checks, no host sync.
          Tensor classes = arange(C, TensorOptions(DType::i64).device(z.device())).reshape({1, C});
          Tensor target_dist = eq(classes, safe.reshape({n, 1})).to(work) * (1.0 - eps);
          Tensor dx = (exp(z) - target_dist - eps / double(C)) * s;
          dx = dx.view(moved_shape);
          if (!inverse.empty()) dx = dx.permute(inverse).contiguous();
          return {dx.to(out_dtype)};
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
