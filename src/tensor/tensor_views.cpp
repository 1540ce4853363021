// Tensor views: new shape/strides/offset over the same storage. Each records
// its backward (see Note [Recording backward]) so views are differentiable.

#include <algorithm>
#include <numeric>
#include <optional>

#include "ddp/autograd/node.h"
#include "ddp/tensor/ops.h"
#include "ddp/tensor/tensor.h"

namespace ddp {

namespace {

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(base.storage(), std::move(shape), std::move(strides),
                                             offset, base.dtype()));
}

// Backward of a view that only reshapes: the gradient gets the input's shape.
void record_reshape(const char* name, const Tensor& in, const Tensor& out) {
  if (!autograd::needs_grad({in})) return;
  Shape shape = in.shape();
  autograd::record(name, {in}, {out}, [shape](const Tensors& g) {
    return Tensors{g[0].reshape(shape)};
  });
}

// Backward of a view that picks a sub-block: zeros of the input's shape with
// the gradient written into the same sub-block. `pick` maps a tensor of the
// input's shape to the view.
void record_subview(const char* name, const Tensor& in, const Tensor& out,
                    std::function<Tensor(const Tensor&)> pick) {
  if (!autograd::needs_grad({in})) return;
  Shape shape = in.shape();
  DType dt = in.dtype();
  Device dev = in.device();
  autograd::record(name, {in}, {out}, [shape, dt, dev, pick](const Tensors& g) {
    Tensor full = Tensor::zeros(shape, TensorOptions(dt).device(dev));
    pick(full).copy_(g[0]);
    return Tensors{full};
  });
}

// Strides for viewing a tensor of (shape, strides) as new_shape without a
// copy, or empty when impossible: each run of old dims that is contiguous in
// memory can be split or merged freely.
std::optional<Shape> view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape) {
  Shape out(new_shape.size());
  // Empty tensors and 0-dim scalars have no layout to preserve.
  if (shape_numel(shape) == 0 || shape.empty()) return contiguous_strides(new_shape);
  int64_t view_d = int64_t(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    // At the start of a chunk (d == 0, or dims d-1 and d not contiguous with each other).
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Shape infer_shape(const Shape& requested, int64_t numel, const char* op, const Tensor& t) {
  Shape shape = requested;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      DDP_CHECK_T(ShapeError, infer_at < 0, "{}: only one dim can be -1 in {}", op, shape_str(requested));
      infer_at = int64_t(i);
    } else {
      DDP_CHECK_T(ShapeError, shape[i] >= 0, "{}: invalid size in {}", op, shape_str(requested));
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    DDP_CHECK_T(ShapeError, known != 0 && numel % known == 0,
                "{}: shape {} is invalid for {}", op, shape_str(requested), t.describe());
    shape[infer_at] = numel / known;
  }
  DDP_CHECK_T(ShapeError, shape_numel(shape) == numel, "{}: shape {} is invalid for {} ({} elements)",
              op, shape_str(requested), t.describe(), numel);
  return shape;
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  check_defined("view");
  Shape shape = infer_shape(requested, numel(), "view", *this);
  auto st = view_strides(this->shape(), strides(), shape);
  DDP_CHECK_T(ShapeError, st.has_value(),
              "view: cannot view {} with strides {} as {} without a copy; use reshape()",
              describe(), shape_str(strides()), shape_str(shape));
  Tensor out = make_view(*this, shape, *st, offset());
  record_reshape("view", *this, out);
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  check_defined("reshape");
  Shape shape = infer_shape(requested, numel(), "reshape", *this);
  if (view_strides(this->shape(), strides(), shape)) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  check_defined("narrow");
  DDP_CHECK_T(IndexError, dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  d = wrap_dim(d, dim(), "narrow");
  int64_t n = size(d);
  if (start < 0) start += n;
  DDP_CHECK_T(IndexError, start >= 0 && length >= 0 && start + length <= n,
              "narrow: start {} length {} out of range for dim {} of {}", start, length, d,
              describe());
  Shape shape = this->shape();
  shape[d] = length;
  Tensor out = make_view(*this, shape, strides(), offset() + start * stride(d));
  record_subview("narrow", *this, out, [d, start, length](const Tensor& t) {
    return t.narrow(d, start, length);
  });
  return out;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  check_defined("slice");
  DDP_CHECK_T(IndexError, dim() > 0, "slice: cannot slice a 0-dim tensor");
  DDP_CHECK(step > 0, "slice: step must be positive, got {}", step);
  d = wrap_dim(d, dim(), "slice");
  int64_t n = size(d);
  // Python slicing: negative bounds count from the end, then clamp to [0, n].
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = this->shape(), st = strides();
  shape[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = make_view(*this, shape, st, offset() + start * stride(d));
  record_subview("slice", *this, out, [d, start, end, step](const Tensor& t) {
    return t.slice(d, start, end, step);
  });
  return out;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  check_defined("select");
  DDP_CHECK_T(IndexError, dim() > 0, "select: cannot select from a 0-dim tensor");
  d = wrap_dim(d, dim(), "select");
  int64_t n = size(d);
  DDP_CHECK_T(IndexError, index >= -n && index < n, "select: index {} out of range for dim {} of {}",
              index, d, describe());
  if (index < 0) index += n;
  Shape shape = this->shape(), st = strides();
  int64_t off = offset() + index * st[d];
  shape.erase(shape.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_view(*this, shape, st, off);
  record_subview("select", *this, out, [d, index](const Tensor& t) { return t.select(d, index); });
  return out;
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  check_defined("permute");
  DDP_CHECK_T(ShapeError, int64_t(dims.size()) == dim(),
              "permute: {} dims given for {}", dims.size(), describe());
  std::vector<int64_t> perm(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape shape(dims.size()), st(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    DDP_CHECK_T(IndexError, !seen[d], "permute: dim {} repeated in [{}]", d, fmt::join(dims, ", "));
    seen[d] = true;
    perm[i] = d;
    shape[i] = size(d);
    st[i] = stride(d);
  }
  Tensor out = make_view(*this, shape, st, offset());
  if (autograd::needs_grad({*this})) {
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = int64_t(i);
    autograd::record("permute", {*this}, {out}, [inverse](const Tensors& g) {
      return Tensors{g[0].permute(inverse)};
    });
  }
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  check_defined("transpose");
  if (dim() == 0) return *this;
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  std::vector<int64_t> perm(dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return permute(perm);
}

Tensor Tensor::t() const {
  check_defined("t");
  DDP_CHECK_T(ShapeError, dim() <= 2, "t: expects a tensor with <= 2 dims, got {}", describe());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::expand(const Shape& target) const {
  check_defined("expand");
  DDP_CHECK_T(ShapeError, target.size() >= shape().size(),
              "expand: cannot expand {} to fewer dims {}", describe(), shape_str(target));
  size_t lead = target.size() - shape().size();
  Shape shape(target.size()), st(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < lead) {
      DDP_CHECK_T(ShapeError, target[i] >= 0, "expand: size -1 not allowed for new leading dim in {}",
                  shape_str(target));
      shape[i] = target[i];
      st[i] = 0;
      continue;
    }
    int64_t have = this->shape()[i - lead], want = target[i] == -1 ? have : target[i];
    DDP_CHECK_T(ShapeError, have == want || have == 1,
                "expand: cannot expand {} to {} (dim {}: {} vs {})", describe(), shape_str(target),
                i, have, want);
    shape[i] = want;
    st[i] = have == want ? strides()[i - lead] : 0;
  }
  if (shape == this->shape()) return *this;
  Tensor out = make_view(*this, shape, st, offset());
  if (autograd::needs_grad({*this})) {
    Shape in_shape = this->shape();
    autograd::record("expand", {*this}, {out}, [in_shape](const Tensors& g) {
      return Tensors{sum_to(g[0], in_shape)};
    });
  }
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  check_defined("unsqueeze");
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape shape = this->shape();
  shape.insert(shape.begin() + d, 1);
  return view(shape);
}

Tensor Tensor::squeeze(int64_t d) const {
  check_defined("squeeze");
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  if (size(d) != 1) return *this;  // like torch: squeezing a non-1 dim is a no-op
  Shape shape = this->shape();
  shape.erase(shape.begin() + d);
  return view(shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  check_defined("flatten");
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  DDP_CHECK_T(IndexError, start_dim <= end_dim, "flatten: start_dim {} after end_dim {}", start_dim,
              end_dim);
  Shape shape(this->shape().begin(), this->shape().begin() + start_dim);
  int64_t n = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) n *= size(i);
  shape.push_back(n);
  shape.insert(shape.end(), this->shape().begin() + end_dim + 1, this->shape().end());
  return reshape(shape);
}

}  // namespace ddp
