// See Note [Memory-format propagation] in include/ddp/tensor/memory_format.h.

#include <algorithm>
#include <numeric>

#include "ddp/tensor/tensor.h"
#include "ddp/tensor/memory_format.h"
#include "ddp/tensor/dense_layout.h"
#include "ddp/core/error.h"

namespace ddp {

bool dense_layout_strides(const Tensor& like, Shape* strides) {
  if (!like.defined() || like.numel() == 0) return false;
  const Shape& shape = like.shape();
  const Shape& st = like.strides();
  const size_t nd = shape.size();
  // Dims from outermost to innermost in memory; ties (size-1 dims, whose
  // stride means nothing) keep their logical order.
  std::vector<size_t> order(nd);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return st[a] > st[b]; });
  Shape out(nd);
  int64_t expected = 1;
  for (size_t k = nd; k-- > 0;) {
    const size_t d = order[k];
    if (shape[d] != 1 && st[d] != expected) return false;  // a gap or an overlap
    out[d] = expected;
    expected *= shape[d];
  }
  *strides = std::move(out);
  return true;
}

Tensor empty_in_layout_of(const std::vector<Tensor>& like, const Shape& shape,
                          TensorOptions opts) {
  for (const Tensor& t : like) {
    if (!t.defined() || t.shape() != shape) continue;
    Shape strides;
    if (!dense_layout_strides(t, &strides)) continue;
    if (strides == contiguous_strides(shape)) break;
    const bool requires_grad = opts.requires_grad_;
    Tensor flat = Tensor::empty({shape_numel(shape)}, opts.requires_grad(false));
    Tensor out = Tensor::from_storage(flat.storage(), shape, strides, 0, opts.dtype_);
    if (requires_grad) out.set_requires_grad(true);
    return out;
  }
  return Tensor::empty(shape, opts);
}

bool is_dense(const Tensor& t) {
  if (!t.defined()) return false;
  if (t.numel() == 0 || t.is_contiguous()) return true;
  Shape strides;
  return dense_layout_strides(t, &strides);
}

bool same_dense_layout(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  if (a.numel() == 0 || (a.is_contiguous() && b.is_contiguous())) return true;
  Shape sa, sb;
  return dense_layout_strides(a, &sa) && dense_layout_strides(b, &sb) && sa == sb;
}

Tensor flat_view(const Tensor& t, const char* who) {
  DDP_CHECK_T(ValueError, is_dense(t), "{}: {} (strides {}) is not dense, so it has no flat view",
              who, t.defined() ? t.describe() : std::string("an undefined tensor"),
              t.defined() ? fmt::format("{}", fmt::join(t.strides(), ", ")) : std::string("-"));
  return Tensor::from_storage(t.storage(), {t.numel()}, {1}, t.offset(), t.dtype());
}

}  // namespace ddp
