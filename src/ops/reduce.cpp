// Reductions: sum, mean, var, max/min (all elements or along a dim),
// argmax/argmin and sum_to. Every kernel call goes through as_rows(): the
// reduced dims are moved last and the input viewed as [rows, cols], the one
// layout Backend::reduce_rows takes, or, when the reduced dims already lie
// outermost, viewed as [cols, rows] for Backend::reduce_cols without a copy.

#include <algorithm>

#include "tensor/autocast_policy.h"
#include "ddp/autograd/node.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/ops.h"
#include "ops/ops_util.h"

namespace ddp {

using namespace ops_detail;

namespace ops_detail {

RowsView as_rows(const Tensor& x, const std::vector<int64_t>& dims) {
  RowsView rv;
  int64_t nd = x.dim();
  std::vector<bool> reduced(size_t(nd), false);
  for (int64_t d : dims) reduced[size_t(d)] = true;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < nd; ++d) {
    int64_t n = x.size(d);
    if (reduced[size_t(d)]) {
      rv.keep_shape.push_back(1);
    } else {
      perm.push_back(d);
      rv.rows *= n;
      rv.keep_shape.push_back(n);
      rv.drop_shape.push_back(n);
    }
  }
  for (int64_t d : dims) {
    perm.push_back(d);
    rv.cols *= x.size(d);
  }
  Tensor xt = x.detach();
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == int64_t(i);
  if (!identity) xt = xt.permute(perm);
  if (!xt.is_contiguous() && nd > 0) {
    // Reduced dims outermost in memory: reduce the columns of that view
    // rather than copy (Note [CUDA column reductions]).
    std::vector<int64_t> outer_first(perm.end() - int64_t(dims.size()), perm.end());
    outer_first.insert(outer_first.end(), perm.begin(), perm.end() - int64_t(dims.size()));
    Tensor xc = x.detach().permute(outer_first);
    if (xc.is_contiguous()) {
      rv.cols2d = xc.view({rv.cols, rv.rows});
      return rv;
    }
  }
  rv.rows2d = xt.contiguous().view({rv.rows, rv.cols});
  return rv;
}

void reduce_view(Backend& be, ReductionOp op, const RowsView& rv, const Tensor& out1d) {
  if (rv.cols2d.defined())
    be.reduce_cols(op, rv.cols2d, out1d);
  else
    be.reduce_rows(op, rv.rows2d, out1d);
}

Tensor sum_into(const char* op, const Tensor& x, const std::vector<int64_t>& dims,
                const Shape& out_shape) {
  RowsView rv = as_rows(x, dims);
  // Integers and bool sum in i64, like torch.sum.
  DType dt = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  Tensor out = empty_out(op, out_shape, dt, x.device());
  Backend& be = backend_for(x.device());
  if (rv.cols == 0) {
    be.fill(out, 0.0);  // an empty sum; the kernel would leave out untouched
  } else {
    reduce_view(be, ReductionOp::sum, rv, out.view({rv.rows}));
  }

  // Backward: every summed element receives its row's gradient.
  if (autograd::needs_grad({x})) {
    Shape keep = rv.keep_shape, xs = x.shape();
    autograd::record(op, {x}, {out}, [keep, xs](const Tensors& g) -> Tensors {
      return {g[0].reshape(keep).expand(xs)};
    });
  }
  return out;
}

}  // namespace ops_detail

namespace {

// x's shape with the sorted dims dropped, or kept as 1.
Shape reduced_shape(const Shape& xs, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < xs.size(); ++d) {
    bool reduced = std::binary_search(dims.begin(), dims.end(), int64_t(d));
    if (!reduced) out.push_back(xs[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

int64_t count_of(const Tensor& x, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  return n;
}

bool is_half(DType dt) { return dt == DType::f16 || dt == DType::bf16; }

void check_floating(const char* op, const Tensor& x) {
  DDP_CHECK_T(DTypeError, is_floating(x.dtype()),
              "{}: expected a floating tensor (f32, f64, f16, bf16), got {}", op, x.describe());
}

// One reduce_rows kernel into a fresh output of out_shape.
Tensor reduce_kernel(const char* op, ReductionOp rop, const RowsView& rv, const Shape& out_shape,
                     DType dtype, Device device) {
  Tensor out = empty_out(op, out_shape, dtype, device);
  reduce_view(backend_for(device), rop, rv, out.view({rv.rows}));
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(amp::detail::AutocastOp::sum, {x},
                                      [&](const Tensors& t) { return sum(t[0], dims, keepdim); });
  check_defined("sum", x, "x");
  std::vector<int64_t> d = normalize_dims("sum", x, dims);
  return sum_into("sum", x, d, reduced_shape(x.shape(), d, keepdim));
}

// mean and var are composite: their gradients come from sum, mul, sub and to.
//
// Note [Half-precision statistics]
// mean and var of f16/bf16 are computed in f32 and rounded once at the end
// (like torch's f32 accumulation): their intermediate sums would overflow
// f16's range (65504) long before the result does.
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(amp::detail::AutocastOp::mean, {x},
                                      [&](const Tensors& t) { return mean(t[0], dims, keepdim); });
  check_defined("mean", x, "x");
  check_floating("mean", x);
  if (is_half(x.dtype())) return mean(x.to(DType::f32), dims, keepdim).to(x.dtype());
  std::vector<int64_t> d = normalize_dims("mean", x, dims);
  // An empty reduction gives 0 * inf = NaN, like torch.
  return mul(sum(x, d, keepdim), 1.0 / double(count_of(x, d)));
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(amp::detail::AutocastOp::var, {x}, [&](const Tensors& t) {
      return var(t[0], dims, correction, keepdim);
    });
  check_defined("var", x, "x");
  check_floating("var", x);
  if (is_half(x.dtype())) return var(x.to(DType::f32), dims, correction, keepdim).to(x.dtype());
  std::vector<int64_t> d = normalize_dims("var", x, dims);
  Tensor centered = sub(x, mean(x, d, /*keepdim=*/true));
  // N - correction <= 0 divides by zero: inf, or NaN for a zero sum, like torch.
  double denom = std::max(0.0, double(count_of(x, d) - correction));
  return mul(sum(mul(centered, centered), d, keepdim), 1.0 / denom);
}

namespace {

// max() / min() over all elements.
Tensor extreme_all(bool is_max, const Tensor& x) {
  const char* name = is_max ? "max" : "min";
  check_defined(name, x, "x");
  DDP_CHECK_T(IndexError, x.numel() > 0,
              "{}: cannot reduce an empty tensor {} (the op has no identity)", name, x.describe());
  std::vector<int64_t> all = normalize_dims(name, x, {});
  RowsView rv = as_rows(x, all);
  Tensor out = reduce_kernel(name, is_max ? ReductionOp::max : ReductionOp::min, rv, {}, x.dtype(),
                             x.device());

  // Backward: the gradient is shared evenly among all elements equal to the
  // extreme, like torch's max().
  if (autograd::needs_grad({x})) {
    Tensor xs = x.detach(), ys = out.detach();
    autograd::record(name, {x}, {out}, [xs, ys](const Tensors& g) -> Tensors {
      Tensor hit = eq(xs, ys);
      Tensor share = div(g[0], sum(hit));
      return {where(hit, share, scalar_tensor(0.0, share.dtype(), share.device()))};
    });
  }
  return out;
}

// max(dim) / min(dim): values and their i64 indices.
ValuesIndices extreme_dim(bool is_max, const Tensor& x, int64_t dim, bool keepdim) {
  const char* name = is_max ? "max" : "min";
  check_defined(name, x, "x");
  std::vector<int64_t> d = normalize_dims(name, x, {dim});
  DDP_CHECK_T(IndexError, x.dim() == 0 || x.size(d[0]) > 0,
              "{}: cannot reduce dim {} of size 0 in {} (the op has no identity)", name, dim,
              x.describe());
  RowsView rv = as_rows(x, d);
  const Shape& out_shape = keepdim ? rv.keep_shape : rv.drop_shape;
  ValuesIndices r;
  r.values = reduce_kernel(name, is_max ? ReductionOp::max : ReductionOp::min, rv, out_shape, x.dtype(),
                           x.device());
  r.indices = reduce_kernel(name, is_max ? ReductionOp::argmax : ReductionOp::argmin, rv, out_shape,
                            DType::i64, x.device());

  // Backward: the gradient goes to the chosen element of each row.
  if (autograd::needs_grad({x})) {
    Tensor idx = r.indices.view(rv.keep_shape);
    Shape keep = rv.keep_shape, xs = x.shape();
    int64_t axis = d.empty() ? 0 : d[0];
    autograd::record(name, {x}, {r.values}, [idx, keep, xs, axis](const Tensors& g) -> Tensors {
      if (xs.empty()) return {g[0]};  // 0-dim: the value is x itself
      Tensor zeros = Tensor::zeros(xs, options(g[0].dtype(), g[0].device()));
      return {scatter_add_unchecked(zeros, axis, idx, g[0].reshape(keep))};
    });
  }
  return r;
}

Tensor arg_extreme(bool is_max, const Tensor& x, int64_t dim, bool keepdim) {
  const char* name = is_max ? "argmax" : "argmin";
  check_defined(name, x, "x");
  std::vector<int64_t> d = normalize_dims(name, x, {dim});
  DDP_CHECK_T(IndexError, x.dim() == 0 || x.size(d[0]) > 0,
              "{}: cannot reduce dim {} of size 0 in {}", name, dim, x.describe());
  RowsView rv = as_rows(x, d);
  return reduce_kernel(name, is_max ? ReductionOp::argmax : ReductionOp::argmin, rv,
                       keepdim ? rv.keep_shape : rv.drop_shape, DType::i64, x.device());
}

}  // namespace

Tensor max(const Tensor& x) { return extreme_all(true, x); }
Tensor min(const Tensor& x) { return extreme_all(false, x); }
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(true, x, dim, keepdim);
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(false, x, dim, keepdim);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extreme(true, x, dim, keepdim);
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extreme(false, x, dim, keepdim);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  check_defined("sum_to", x, "x");
  if (x.shape() == shape) return x;
  // shape must broadcast to x's shape: the reverse direction is summed away.
  const Shape& xs = x.shape();
  bool ok = shape.size() <= xs.size();
  size_t lead = ok ? xs.size() - shape.size() : 0;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < lead; ++i) dims.push_back(int64_t(i));
  for (size_t i = 0; ok && i < shape.size(); ++i) {
    if (shape[i] == xs[lead + i]) continue;
    if (shape[i] == 1) {
      dims.push_back(int64_t(lead + i));
    } else {
      ok = false;
    }
  }
  DDP_CHECK_T(ShapeError, ok, "sum_to: cannot sum {} down to shape {} (it does not broadcast to it)",
              x.describe(), shape_str(shape));
  return sum_into("sum_to", x, dims, shape);
}

}  // namespace ddp
