#include "ops/ops_util.h"

#include <algorithm>
#include <cmath>

namespace ddp::ops_detail {

void check_defined(const char* op, const Tensor& t, const char* arg) {
  DDP_CHECK(t.defined(), "{}: argument '{}' is an undefined tensor", op, arg);
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  DDP_CHECK_T(DeviceError, a.device() == b.device(),
              "{}: expected all tensors on one device, got {} and {}", op, a.describe(),
              b.describe());
}

void check_same_device(const char* op, const Tensors& xs) {
  for (size_t i = 1; i < xs.size(); ++i) check_same_device(op, xs[0], xs[i]);
}

void check_max_dims(const char* op, const Shape& shape) {
  DDP_CHECK_T(ShapeError, shape.size() <= size_t(kMaxDims),
              "{}: result shape {} has {} dims; at most {} are supported", op, shape_str(shape),
              shape.size(), kMaxDims);
}

Shape broadcast_shape(const Shape& a, const Shape& b, bool* ok) {
  *ok = true;
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    // Align from the right; a missing dim acts as size 1.
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      *ok = false;
      return {};
    }
  }
  return out;
}

Shape broadcast_shapes(const char* op, const Tensor& a, const Tensor& b) {
  bool ok = false;
  Shape s = broadcast_shape(a.shape(), b.shape(), &ok);
  DDP_CHECK_T(ShapeError, ok, "{}: shapes do not broadcast: {} and {}", op, a.describe(),
              b.describe());
  return s;
}

Tensor expand_to(const Tensor& t, const Shape& shape) {
  return t.shape() == shape ? t : t.expand(shape);
}

Tensor cast_to(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : t.detach().to(dtype);
}

DType scalar_operand_dtype(DType tensor_dtype, double value) {
  if (is_floating(tensor_dtype)) return tensor_dtype;
  if (std::nearbyint(value) != value) return DType::f32;  // fractional, inf or NaN
  return tensor_dtype == DType::bool_ ? DType::i64 : tensor_dtype;
}

Tensor scalar_tensor(double value, DType dtype, Device device) {
  return Tensor::scalar(value, options(dtype, device));
}

TensorOptions options(DType dtype, Device device) {
  return TensorOptions().dtype(dtype).device(device);
}

Tensor empty_out(const char* op, const Shape& shape, DType dtype, Device device) {
  check_max_dims(op, shape);
  return Tensor::empty(shape, options(dtype, device));
}

Tensor empty_out(const char* op, const Shape& shape, DType dtype, Device device,
                 const Tensors& inputs) {
  check_max_dims(op, shape);
  return empty_in_layout_of(inputs, shape, options(dtype, device));
}

std::vector<int64_t> normalize_dims(const char* op, const Tensor& x,
                                    const std::vector<int64_t>& dims) {
  int64_t nd = x.dim();
  std::vector<int64_t> out;
  if (nd == 0) {
    // Like torch, a 0-dim tensor has one implicit dim to name (0 or -1).
    for (int64_t d : dims) wrap_dim(d, 1, op);
    return out;
  }
  if (dims.empty()) {
    for (int64_t d = 0; d < nd; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, nd, op));
  std::sort(out.begin(), out.end());
  DDP_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(),
            "{}: dims {} name the same dim twice (input {})", op, dims, x.describe());
  return out;
}

int64_t host_int(const Tensor& t) {
  return t.detach().to(Device::cpu(), DType::i64).item<int64_t>();
}

void host_min_max(const Tensor& t, int64_t* lo, int64_t* hi) {
  // One row holding every element; reduce_rows keeps the dtype for min/max.
  Tensor rows = t.detach().contiguous().view({1, t.numel()});
  Backend& be = backend_for(t.device());
  Tensor mn = Tensor::empty({1}, options(t.dtype(), t.device()));
  Tensor mx = Tensor::empty({1}, options(t.dtype(), t.device()));
  be.reduce_rows(ReductionOp::min, rows, mn);
  be.reduce_rows(ReductionOp::max, rows, mx);
  *lo = host_int(mn);
  *hi = host_int(mx);
}

std::vector<double> host_doubles(const Tensor& t) {
  return t.detach().to(Device::cpu(), DType::f64).contiguous().to_vector<double>();
}

}  // namespace ddp::ops_detail
