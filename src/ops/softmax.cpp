// softmax and log_softmax along any dim, through the row kernels of the
// backend: the dim is moved last, the input made contiguous and viewed as
// [rows, cols]; the result is moved back (and made contiguous).

#include <algorithm>
#include <utility>

#include "kernel_list.h"
#include "tensor/autocast_policy.h"
#include "ddp/autograd/node.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/ops.h"
#include "ops/ops_util.h"

namespace ddp {

using namespace ops_detail;

namespace {

// t with `dim` swapped to the end, contiguous, as [rows, cols]; a 0-dim t is
// one row of one column.
Tensor to_rows(const Tensor& t, int64_t dim) {
  if (t.dim() == 0) return t.contiguous().view({1, 1});
  Tensor moved = dim == t.dim() - 1 ? t : t.transpose(dim, -1);
  int64_t rows = 1;
  for (int64_t i = 0; i < t.dim() - 1; ++i) rows *= moved.size(i);
  return moved.contiguous().view({rows, t.size(dim)});
}

// The inverse of to_rows for a [rows, cols] result: back to `shape`.
Tensor from_rows(const Tensor& rows2d, const Shape& shape, int64_t dim) {
  if (shape.empty()) return rows2d.view({});
  if (dim == int64_t(shape.size()) - 1) return rows2d.view(shape);
  Shape moved = shape;
  std::swap(moved[size_t(dim)], moved.back());
  return rows2d.view(moved).transpose(dim, -1).contiguous();
}

Tensor softmax_impl(const char* name, bool log, const Tensor& x, int64_t dim) {
  check_defined(name, x, "x");
  DDP_CHECK_T(DTypeError, is_floating(x.dtype()),
              "{}: expected a floating tensor (f32, f64, f16, bf16), got {}", name, x.describe());
  int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), name);
  Tensor in = to_rows(x.detach(), d);
  Tensor y2 = empty_out(name, in.shape(), x.dtype(), x.device());
  kernels::call<kernels::softmax_forward>(x.device(), in, y2, log);
  Tensor out = from_rows(y2, x.shape(), d);

  // Backward: the row kernel on y (saved in its [rows, cols] layout) and dy.
  if (autograd::needs_grad({x})) {
    Shape xs = x.shape();
    autograd::record(name, {x}, {out}, [y2, xs, d, log](const Tensors& g) -> Tensors {
      Tensor dy = to_rows(cast_to(g[0], y2.dtype()), d);
      Tensor dx = Tensor::empty(y2.shape(), options(y2.dtype(), y2.device()));
      kernels::call<kernels::softmax_backward>(y2.device(), y2, dy, dx, log);
      return {from_rows(dx, xs, d)};
    });
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(amp::detail::AutocastOp::softmax, {x},
                                      [dim](const Tensors& t) { return softmax(t[0], dim); });
  return softmax_impl("softmax", false, x, dim);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(amp::detail::AutocastOp::log_softmax, {x},
                                      [dim](const Tensors& t) { return log_softmax(t[0], dim); });
  return softmax_impl("log_softmax", true, x, dim);
}

}  // namespace ddp
