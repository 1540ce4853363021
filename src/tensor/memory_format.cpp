// See Note [Memory-format propagation] and Note [Channels-last tensors] in
// include/ddp/tensor/memory_format.h.

#include <algorithm>
#include <numeric>

#include "ddp/tensor/tensor.h"
#include "ddp/tensor/memory_format.h"
#include "ddp/tensor/dense_layout.h"
#include "ddp/core/error.h"

namespace ddp {

bool is_channels_last(const Tensor& t) {
  if (!t.defined() || t.dim() != 4) return false;
  const int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  const Shape& st = t.strides();
  // A 1-channel image batch is contiguous both ways; it counts as NHWC only
  // when to_channels_last() marked it so (channel stride 1), so that a
  // channels-last model's first conv keeps its output NHWC.
  if (t.is_contiguous() && !(c == 1 && h * w > 1 && st[1] == 1)) return false;
  // A dim of size 1 may have any stride.
  return (c == 1 || st[1] == 1) && (w == 1 || st[3] == c) && (h == 1 || st[2] == w * c) &&
         (t.size(0) == 1 || st[0] == h * w * c);
}

Tensor to_channels_last(const Tensor& t) {
  DDP_CHECK_T(ShapeError, t.defined() && t.dim() == 4,
              "to_channels_last: expected a 4-D [N, C, H, W] tensor, got {}",
              t.defined() ? t.describe() : "an undefined tensor");
  if (is_channels_last(t)) return t;
  if (t.size(1) == 1)  // [N, 1, H, W] -> [N, H, W, 1] keeps the element order
    return t.contiguous().reshape({t.size(0), t.size(2), t.size(3), 1}).permute({0, 3, 1, 2});
  return t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
}

Tensor empty_nchw(const Shape& shape, DType dtype, Device device, bool channels_last) {
  TensorOptions opts = TensorOptions(dtype).device(device);
  if (!channels_last) return Tensor::empty(shape, opts);
  return Tensor::empty({shape[0], shape[2], shape[3], shape[1]}, opts).permute({0, 3, 1, 2});
}

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
