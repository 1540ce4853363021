// Joining and indexing: cat, stack, index_select, gather, scatter_add,
// one_hot. Index values are range-checked here, on the host (a min/max
// reduction plus a tiny copy on CUDA), so kernels never see a bad index.
// Backward formulas use the *_unchecked variants, which skip that check.

#include <algorithm>
#include <string>

#include "tensor/autocast_policy.h"
#include "ddp/autograd/node.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/ops.h"
#include "ops/ops_util.h"

namespace ddp {

using namespace ops_detail;

namespace {

void check_index_dtype(const char* op, const Tensor& index) {
  DDP_CHECK_T(DTypeError, index.dtype() == DType::i64 || index.dtype() == DType::i32,
              "{}: index must be i32 or i64, got {}", op, index.describe());
}

// IndexError unless every index value lies in [0, size).
void check_index_range(const char* op, const Tensor& index, int64_t size, const Tensor& x,
                       int64_t dim) {
  if (index.numel() == 0) return;
  int64_t lo = 0, hi = 0;
  host_min_max(index, &lo, &hi);
  DDP_CHECK_T(IndexError, lo >= 0 && hi < size,
              "{}: index values span [{}, {}] but dim {} of {} has size {}", op, lo, hi, dim,
              x.describe(), size);
}

}  // namespace

// ---- cat / stack ----------------------------------------------------------------

Tensor cat(const Tensors& xs, int64_t dim) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(amp::detail::AutocastOp::cat, xs,
                                      [dim](const Tensors& t) { return cat(t, dim); });
  const char* name = "cat";
  DDP_CHECK(!xs.empty(), "cat: expected at least one tensor");
  for (const Tensor& x : xs) check_defined(name, x, "xs");
  check_same_device(name, xs);
  const Tensor& x0 = xs[0];
  DDP_CHECK_T(ShapeError, x0.dim() >= 1, "cat: 0-dim tensors cannot be joined, got {}",
              x0.describe());
  int64_t d = wrap_dim(dim, x0.dim(), name);
  Shape out_shape = x0.shape();
  out_shape[size_t(d)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    DDP_CHECK_T(DTypeError, x.dtype() == x0.dtype(),
                "cat: all tensors must have one dtype, got xs[0] {} and xs[{}] {}",
                x0.describe(), i, x.describe());
    bool same = x.dim() == x0.dim();
    for (int64_t k = 0; same && k < x0.dim(); ++k) same = k == d || x.size(k) == x0.size(k);
    DDP_CHECK_T(ShapeError, same, "cat: shapes differ outside dim {}: xs[0] {} and xs[{}] {}", d,
                x0.describe(), i, x.describe());
    out_shape[size_t(d)] += x.size(d);
  }
  Tensor out = empty_out(name, out_shape, x0.dtype(), x0.device());
  Backend& be = backend_for(x0.device());
  std::vector<int64_t> starts;
  int64_t offset = 0;
  for (const Tensor& x : xs) {
    starts.push_back(offset);
    if (x.numel() > 0) be.copy(x.detach(), out.narrow(d, offset, x.size(d)));
    offset += x.size(d);
  }

  // Backward: each input gets its slice of the gradient.
  if (autograd::needs_grad(xs)) {
    std::vector<bool> need;
    std::vector<int64_t> sizes;
    for (const Tensor& x : xs) {
      need.push_back(autograd::needs_grad({x}));
      sizes.push_back(x.size(d));
    }
    autograd::record(name, xs, {out}, [need, sizes, starts, d](const Tensors& g) -> Tensors {
      Tensors r(need.size());
      for (size_t i = 0; i < need.size(); ++i)
        if (need[i]) r[i] = g[0].narrow(d, starts[i], sizes[i]);
      return r;
    });
  }
  return out;
}

Tensor stack(const Tensors& xs, int64_t dim) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(amp::detail::AutocastOp::stack, xs,
                                      [dim](const Tensors& t) { return stack(t, dim); });
  const char* name = "stack";
  DDP_CHECK(!xs.empty(), "stack: expected at least one tensor");
  for (const Tensor& x : xs) check_defined(name, x, "xs");
  check_same_device(name, xs);
  const Tensor& x0 = xs[0];
  for (size_t i = 0; i < xs.size(); ++i) {
    DDP_CHECK_T(DTypeError, xs[i].dtype() == x0.dtype(),
                "stack: all tensors must have one dtype, got xs[0] {} and xs[{}] {}",
                x0.describe(), i, xs[i].describe());
    DDP_CHECK_T(ShapeError, xs[i].shape() == x0.shape(),
                "stack: all tensors must have one shape, got xs[0] {} and xs[{}] {}",
                x0.describe(), i, xs[i].describe());
  }
  int64_t d = wrap_dim(dim, x0.dim() + 1, name);
  Shape out_shape = x0.shape();
  out_shape.insert(out_shape.begin() + d, int64_t(xs.size()));
  Tensor out = empty_out(name, out_shape, x0.dtype(), x0.device());
  Backend& be = backend_for(x0.device());
  if (out.numel() > 0)
    for (size_t i = 0; i < xs.size(); ++i) be.copy(xs[i].detach(), out.select(d, int64_t(i)));

  // Backward: input i gets the gradient's slice i along the new dim.
  if (autograd::needs_grad(xs)) {
    std::vector<bool> need;
    for (const Tensor& x : xs) need.push_back(autograd::needs_grad({x}));
    autograd::record(name, xs, {out}, [need, d](const Tensors& g) -> Tensors {
      Tensors r(need.size());
      for (size_t i = 0; i < need.size(); ++i)
        if (need[i]) r[i] = g[0].select(d, int64_t(i));
      return r;
    });
  }
  return out;
}

// ---- gather / scatter_add ----------------------------------------------------------

namespace ops_detail {

Tensor gather_unchecked(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = empty_out("gather", index.shape(), x.dtype(), x.device());
  Tensor idx = index.detach();
  if (out.numel() > 0) backend_for(x.device()).gather(x.detach(), dim, idx, out);

  // Backward: each gathered element sends its gradient back to its source.
  if (autograd::needs_grad({x})) {
    Shape xs = x.shape();
    autograd::record("gather", {x}, {out}, [xs, dim, idx](const Tensors& g) -> Tensors {
      Tensor zeros = Tensor::zeros(xs, options(g[0].dtype(), g[0].device()));
      return {scatter_add_unchecked(zeros, dim, idx, g[0])};
    });
  }
  return out;
}

Tensor scatter_add_unchecked(const Tensor& x, int64_t dim, const Tensor& index,
                             const Tensor& src) {
  Backend& be = backend_for(x.device());
  Tensor out = empty_out("scatter_add", x.shape(), x.dtype(), x.device());
  be.copy(x.detach(), out);
  // Only the part of src that index covers takes part (like torch).
  Tensor used = src.detach();
  for (int64_t k = 0; k < index.dim(); ++k)
    if (used.size(k) != index.size(k)) used = used.narrow(k, 0, index.size(k));
  Tensor idx = index.detach();
  if (idx.numel() > 0) be.scatter_add(out, dim, idx, used);

  // Backward: x passes the gradient through; src gets it gathered at index
  // (zero where src was not used).
  if (autograd::needs_grad({x, src})) {
    bool need_x = autograd::needs_grad({x}), need_src = autograd::needs_grad({src});
    Shape ss = src.shape();
    autograd::record("scatter_add", {x, src}, {out}, [=](const Tensors& g) -> Tensors {
      Tensors r(2);
      if (need_x) r[0] = g[0];
      if (need_src) {
        Tensor gs = gather_unchecked(g[0], dim, idx);
        if (gs.shape() != ss) {
          Tensor full = Tensor::zeros(ss, options(gs.dtype(), gs.device()));
          Tensor part = full;
          for (int64_t k = 0; k < idx.dim(); ++k) part = part.narrow(k, 0, idx.size(k));
          backend_for(gs.device()).copy(gs, part);
          gs = full;
        }
        r[1] = gs;
      }
      return r;
    });
  }
  return out;
}

}  // namespace ops_detail

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* name = "gather";
  check_defined(name, x, "x");
  check_defined(name, index, "index");
  check_same_device(name, x, index);
  check_index_dtype(name, index);
  DDP_CHECK_T(ShapeError, x.dim() >= 1 && index.dim() == x.dim(),
              "gather: index must have as many dims as x (at least 1): x {}, index {}",
              x.describe(), index.describe());
  int64_t d = wrap_dim(dim, x.dim(), name);
  for (int64_t k = 0; k < x.dim(); ++k)
    DDP_CHECK_T(ShapeError, k == d || index.size(k) <= x.size(k),
                "gather: index {} is larger than x {} in dim {}", index.describe(), x.describe(), k);
  check_max_dims(name, x.shape());
  check_index_range(name, index, x.size(d), x, d);
  return gather_unchecked(x, d, index);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  const char* name = "scatter_add";
  check_defined(name, x, "x");
  check_defined(name, index, "index");
  check_defined(name, src, "src");
  check_same_device(name, {x, index, src});
  check_index_dtype(name, index);
  DDP_CHECK_T(DTypeError, x.dtype() == src.dtype() && x.dtype() != DType::bool_,
              "scatter_add: x and src must have one numeric dtype, got x {} and src {}",
              x.describe(), src.describe());
  DDP_CHECK_T(ShapeError, x.dim() >= 1 && index.dim() == x.dim() && src.dim() == x.dim(),
              "scatter_add: x, index and src must have the same number of dims (at least 1): "
              "x {}, index {}, src {}",
              x.describe(), index.describe(), src.describe());
  int64_t d = wrap_dim(dim, x.dim(), name);
  for (int64_t k = 0; k < x.dim(); ++k)
    DDP_CHECK_T(ShapeError, index.size(k) <= src.size(k) && (k == d || index.size(k) <= x.size(k)),
                "scatter_add: index {} is larger than src {} or x {} in dim {}",
                index.describe(), src.describe(), x.describe(), k);
  check_max_dims(name, x.shape());
  check_index_range(name, index, x.size(d), x, d);
  return scatter_add_unchecked(x, d, index, src);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* name = "index_select";
  check_defined(name, x, "x");
  check_defined(name, index, "index");
  check_same_device(name, x, index);
  check_index_dtype(name, index);
  DDP_CHECK_T(ShapeError, x.dim() >= 1 && index.dim() <= 1,
              "index_select: expected x with at least 1 dim and a 0-D or 1-D index, got x {}, "
              "index {}",
              x.describe(), index.describe());
  int64_t d = wrap_dim(dim, x.dim(), name);
  check_max_dims(name, x.shape());
  check_index_range(name, index, x.size(d), x, d);
  // A gather whose index is the 1-D index broadcast across the other dims.
  int64_t n = index.numel();
  Shape out_shape = x.shape(), index_shape(size_t(x.dim()), 1);
  out_shape[size_t(d)] = n;
  index_shape[size_t(d)] = n;
  Tensor idx = index.detach().reshape({n}).view(index_shape).expand(out_shape);
  return gather_unchecked(x, d, idx);
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  const char* name = "one_hot";
  check_defined(name, index, "index");
  check_index_dtype(name, index);
  DDP_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 (infer) or >= 0, got {}",
            num_classes);
  int64_t lo = 0, hi = -1;
  if (index.numel() > 0) host_min_max(index, &lo, &hi);
  if (num_classes == -1) {
    DDP_CHECK(index.numel() > 0, "one_hot: cannot infer num_classes from an empty index {}",
              index.describe());
    num_classes = hi + 1;
  }
  DDP_CHECK_T(IndexError, lo >= 0 && hi < num_classes,
              "one_hot: index values span [{}, {}], outside [0, {}) for index {}", lo, hi,
              num_classes, index.describe());
  Shape out_shape = index.shape();
  out_shape.push_back(num_classes);
  Tensor out = empty_out(name, out_shape, DType::i64, index.device());
  Backend& be = backend_for(index.device());
  be.fill(out, 0.0);
  if (index.numel() > 0) {
    // Add 1 at each index along the new last dim.
    Tensor idx = index.detach().unsqueeze(-1);
    Tensor ones = scalar_tensor(1.0, DType::i64, index.device()).expand(idx.shape());
    be.scatter_add(out, out.dim() - 1, idx, ones);
  }
  return out;
}

}  // namespace ddp
