// Tensor: factories, metadata, copies and conversions, in-place arithmetic.
// Views are in tensor_views.cpp; autograd methods in src/autograd/.

#include "ddp/tensor/tensor.h"

#include <cstring>
#include <sstream>

#include "ddp/autograd/grad_mode.h"
#include "ddp/autograd/node.h"
#include "ddp/core/dispatch.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/memory_format.h"
#include "ddp/tensor/ops.h"

namespace ddp {

TensorImpl::TensorImpl(Storage s, Shape sh, Shape st, int64_t off, DType dt)
    : storage(std::move(s)), shape(std::move(sh)), strides(std::move(st)), offset(off), dtype(dt) {}
TensorImpl::~TensorImpl() = default;

// ---- shape helpers ----------------------------------------------------------

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;  // a 0-dim tensor accepts 0/-1
  DDP_CHECK_T(IndexError, dim >= lo && dim <= hi, "{}: dim {} out of range for a {}-dim tensor", op,
              dim, ndim);
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

// ---- factories ----------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, TensorOptions opts) {
  for (int64_t d : shape)
    DDP_CHECK_T(ShapeError, d >= 0, "empty: negative size in shape {}", shape_str(shape));
  DDP_CHECK_T(ShapeError, shape.size() <= 64, "empty: {} dims is too many", shape.size());
  int64_t n = shape_numel(shape);
  Storage st = Storage::allocate(size_t(n) * element_size(opts.dtype_), opts.device_);
  Tensor t(std::make_shared<TensorImpl>(std::move(st), shape, contiguous_strides(shape), 0,
                                        opts.dtype_));
  if (opts.requires_grad_) t.set_requires_grad(true);
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, TensorOptions opts) {
  bool rg = opts.requires_grad_;
  Tensor t = empty(shape, opts.requires_grad(false));
  t.fill_(value);
  if (rg) t.set_requires_grad(true);
  return t;
}
Tensor Tensor::zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor Tensor::ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor Tensor::scalar(double value, TensorOptions opts) { return full({}, value, opts); }

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opts) {
  for (int64_t d : shape)
    DDP_CHECK_T(ShapeError, d >= 0, "from_vector: negative size in shape {}", shape_str(shape));
  DDP_CHECK_T(ShapeError, int64_t(values.size()) == shape_numel(shape),
              "from_vector: {} values do not fill shape {} ({} elements)", values.size(),
              shape_str(shape), shape_numel(shape));
  constexpr DType src_dtype = dtype_of<T>();
  if (!opts.dtype_set_) opts = opts.dtype(src_dtype);  // from_vector<int32_t> gives i32
  Tensor host = empty(shape, TensorOptions(src_dtype));
  T* p = host.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];  // vector<bool> has no data()
  Tensor out = host.to(opts.device_, opts.dtype_);
  if (out.is_same(host)) out = host;
  if (opts.requires_grad_) out.set_requires_grad(true);
  return out;
}
#define DDP_INSTANTIATE_FROM_VECTOR(name, type, str) \
  template Tensor Tensor::from_vector<type>(const std::vector<type>&, const Shape&, TensorOptions);
DDP_FOR_EACH_DTYPE(DDP_INSTANTIATE_FROM_VECTOR)
#undef DDP_INSTANTIATE_FROM_VECTOR

Tensor Tensor::from_storage(Storage storage, const Shape& shape, const Shape& strides,
                            int64_t offset, DType dtype) {
  DDP_CHECK_T(ShapeError, shape.size() == strides.size(),
              "from_storage: shape {} and strides {} differ in rank", shape_str(shape),
              shape_str(strides));
  int64_t last = offset;  // highest element index reached
  for (size_t i = 0; i < shape.size(); ++i) {
    DDP_CHECK_T(ShapeError, shape[i] >= 0 && strides[i] >= 0,
                "from_storage: negative size or stride in shape {} strides {}", shape_str(shape),
                shape_str(strides));
    last += std::max<int64_t>(shape[i] - 1, 0) * strides[i];
  }
  if (shape_numel(shape) == 0) last = offset - 1;  // an empty view reads nothing
  DDP_CHECK_T(ShapeError, offset >= 0 && (last < offset ||
                  size_t(last + 1) * element_size(dtype) <= storage.nbytes()),
              "from_storage: shape {} strides {} offset {} exceeds the storage of {} bytes",
              shape_str(shape), shape_str(strides), offset, storage.nbytes());
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape, strides, offset, dtype));
}

// ---- metadata ---------------------------------------------------------------

void Tensor::check_defined(const char* op) const {
  DDP_CHECK(impl_ != nullptr, "{}: the tensor is undefined", op);
}
const Shape& Tensor::shape() const { check_defined("shape"); return impl_->shape; }
const Shape& Tensor::strides() const { check_defined("strides"); return impl_->strides; }
int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }
int64_t Tensor::offset() const { check_defined("offset"); return impl_->offset; }
int64_t Tensor::dim() const { return int64_t(shape().size()); }
int64_t Tensor::numel() const { return shape_numel(shape()); }
size_t Tensor::nbytes() const { return size_t(numel()) * element_size(dtype()); }
DType Tensor::dtype() const { check_defined("dtype"); return impl_->dtype; }
Device Tensor::device() const { check_defined("device"); return impl_->storage.device(); }
const Storage& Tensor::storage() const { check_defined("storage"); return impl_->storage; }
uint64_t Tensor::version() const { return storage().version(); }
void Tensor::bump_version() const { storage().bump_version(); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim(); i-- > 0;) {
    if (impl_->shape[i] == 1) continue;  // any stride is fine for a size-1 dim
    if (impl_->strides[i] != expected) return numel() == 0;
    expected *= impl_->shape[i];
  }
  return true;
}

std::string Tensor::describe() const {
  if (!impl_) return "undefined tensor";
  return fmt::format("{}{} on {}", dtype_name(dtype()), shape_str(shape()), device().str());
}

std::string Tensor::to_string() const {
  if (!impl_) return "undefined tensor";
  std::vector<double> v = to_vector<double>();
  constexpr size_t kMaxShown = 64;
  std::ostringstream os;
  os << describe() << " {";
  for (size_t i = 0; i < v.size() && i < kMaxShown; ++i) os << (i ? ", " : "") << v[i];
  if (v.size() > kMaxShown) os << ", ...";
  os << "}";
  return os.str();
}

void* Tensor::data_ptr() const {
  check_defined("data_ptr");
  return static_cast<char*>(impl_->storage.data()) + impl_->offset * element_size(impl_->dtype);
}

template <class T> T* Tensor::data() const {
  DDP_CHECK_T(DTypeError, dtype() == dtype_of<T>(), "data<{}>: the tensor is {}",
              dtype_name(dtype_of<T>()), describe());
  return static_cast<T*>(data_ptr());
}
#define DDP_INSTANTIATE_DATA(name, type, str) template type* Tensor::data<type>() const;
DDP_FOR_EACH_DTYPE(DDP_INSTANTIATE_DATA)
#undef DDP_INSTANTIATE_DATA

// ---- copies and conversion --------------------------------------------------

// Copies a contiguous tensor to another device with the same dtype. CUDA to
// CUDA on another ordinal goes through the host: rare, and kept simple.
// See Note [Memory-format propagation]: a dense layout (channels-last, any
// permutation) crosses devices as it is, as torch's .to(device) keeps it: its
// elements fill one block from data_ptr(), so one copy of that block with the
// same strides on the other side. Anything else travels contiguous.
static Tensor transfer(const Tensor& src, Device device, bool non_blocking) {
  Shape dense;
  const bool keep = dense_layout_strides(src, &dense) && dense == src.strides();
  Tensor s = keep ? src : src.contiguous();
  const TensorOptions opts = TensorOptions(s.dtype()).device(device);
  Tensor dst = keep ? empty_in_layout_of({s}, s.shape(), opts) : Tensor::empty(s.shape(), opts);
  if (s.numel() == 0) return dst;
  if (device.is_cuda() && s.device().is_cpu()) {
    backend_for(device).copy_from_host(s.data_ptr(), dst, non_blocking);
  } else if (device.is_cpu() && s.device().is_cuda()) {
    backend_for(s.device()).copy_to_host(s, dst.data_ptr(), non_blocking);
  } else {
    Tensor host = transfer(s, Device::cpu(), false);
    backend_for(device).copy_from_host(host.data_ptr(), dst, false);
  }
  return dst;
}

// Records the backward of a conversion (dtype or device): the gradient goes
// back to the source's dtype and device.
static void record_conversion(const char* name, const Tensor& src, const Tensor& out) {
  if (!autograd::needs_grad({src})) return;
  DType dt = src.dtype();
  Device dev = src.device();
  autograd::record(name, {src}, {out}, [dt, dev](const Tensors& g) {
    return Tensors{g[0].to(dev, dt)};
  });
}

Tensor Tensor::to(Device device, DType dtype, bool non_blocking) const {
  check_defined("to");
  if (device == this->device() && dtype == this->dtype()) return *this;
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    if (device == this->device()) {
      // See Note [Memory-format propagation]: a cast keeps a dense layout.
      out = empty_in_layout_of({*this}, shape(), TensorOptions(dtype).device(device));
      backend_for(device).copy(*this, out);
    } else if (dtype == this->dtype()) {
      out = transfer(*this, device, non_blocking);
    } else if (device.is_cpu()) {  // move first, then cast on the host
      out = transfer(*this, device, non_blocking).to(dtype);
    } else {  // cast where the data is, then move
      out = to(dtype).to(device, non_blocking);
    }
  }
  record_conversion("to", *this, out);
  return out;
}
Tensor Tensor::to(Device device, bool non_blocking) const {
  check_defined("to");
  return to(device, dtype(), non_blocking);
}
Tensor Tensor::to(DType dtype) const {
  check_defined("to");
  return to(device(), dtype);
}

// A differentiable copy of src into the fresh tensor out.
static Tensor copy_into(const Tensor& src, Tensor out, const char* op) {
  backend_for(src.device()).copy(src, out);
  if (autograd::needs_grad({src}))
    autograd::record(op, {src}, {out}, [](const Tensors& g) { return Tensors{g[0]}; });
  return out;
}

Tensor Tensor::clone() const {
  check_defined("clone");
  // See Note [Memory-format propagation]: a clone keeps a dense layout.
  const TensorOptions opts = TensorOptions(dtype()).device(device());
  return copy_into(*this, empty_in_layout_of({*this}, shape(), opts), "clone");
}

Tensor Tensor::contiguous() const {
  check_defined("contiguous");
  if (is_contiguous()) return *this;
  return copy_into(*this, Tensor::empty(shape(), TensorOptions(dtype()).device(device())), "clone");
}

// Note [In-place ops and autograd]
// copy_, fill_, add_ and friends are not recorded. They raise on a tensor that
// requires grad while grad mode is on (like torch's leaf check), so an in-place
// write can never silently corrupt a recorded graph; optimizers and the DDP
// engine use them under NoGradGuard.
static void check_inplace(const Tensor& t, const char* op) {
  DDP_CHECK(!(autograd::grad_enabled() && t.requires_grad()),
            "{}: in-place operation on {} that requires grad while grad mode is on; "
            "use a NoGradGuard scope or detach()",
            op, t.describe());
  for (int64_t i = 0; i < t.dim(); ++i)
    DDP_CHECK(t.stride(i) != 0 || t.size(i) <= 1,
              "{}: {} has overlapping memory (an expanded view); clone() it first", op,
              t.describe());
  // Every in-place method passes here just before it writes: Note [Tensor
  // version counter] in storage.h.
  t.bump_version();
}

// src expanded to shape, for an in-place op that writes shape: broadcasting
// goes into src only, never into the destination.
static Tensor broadcast_source(const Tensor& src, const Shape& shape, const char* op) {
  bool ok = src.dim() <= int64_t(shape.size());
  for (int64_t i = 0; ok && i < src.dim(); ++i) {
    int64_t have = src.shape()[src.dim() - 1 - i], want = shape[shape.size() - 1 - i];
    ok = have == want || have == 1;
  }
  DDP_CHECK_T(ShapeError, ok, "{}: cannot broadcast {} to shape {}", op, src.describe(),
              shape_str(shape));
  return src.expand(shape);
}

Tensor& Tensor::copy_(const Tensor& src, bool non_blocking) {
  check_defined("copy_");
  DDP_CHECK(src.defined(), "copy_: the source tensor is undefined");
  check_inplace(*this, "copy_");
  Tensor s = broadcast_source(src, shape(), "copy_");
  autograd::NoGradGuard no_grad;
  if (s.device() != device()) {
    if (s.dtype() != dtype()) s = s.to(dtype());
    if (is_contiguous() && numel() > 0 && s.device().is_cpu()) {
      backend_for(device()).copy_from_host(s.contiguous().data_ptr(), *this, non_blocking);
      return *this;
    }
    if (is_contiguous() && numel() > 0 && device().is_cpu()) {
      backend_for(s.device()).copy_to_host(s.contiguous(), data_ptr(), non_blocking);
      return *this;
    }
    s = s.contiguous().to(device(), non_blocking);
  }
  backend_for(device()).copy(s, *this);
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_defined("fill_");
  check_inplace(*this, "fill_");
  backend_for(device()).fill(*this, value);
  return *this;
}

template <class T> std::vector<T> Tensor::to_vector() const {
  check_defined("to_vector");
  autograd::NoGradGuard no_grad;
  Tensor host = to(Device::cpu(), dtype_of<T>()).contiguous();
  const T* p = static_cast<const T*>(host.data_ptr());
  return std::vector<T>(p, p + host.numel());
}
template <class T> T Tensor::item() const {
  check_defined("item");
  DDP_CHECK(numel() == 1, "item: needs exactly one element, got {}", describe());
  return to_vector<T>()[0];
}
#define DDP_INSTANTIATE_ITEM(name, type, str) \
  template std::vector<type> Tensor::to_vector<type>() const; \
  template type Tensor::item<type>() const;
DDP_FOR_EACH_DTYPE(DDP_INSTANTIATE_ITEM)
#undef DDP_INSTANTIATE_ITEM

// ---- in-place arithmetic ------------------------------------------------------

// this = this (op) other, with other broadcast to this shape and cast to this
// dtype. Aliasing out == a is safe: each element is read before it is written.
static Tensor& binary_inplace(Tensor& self, BinaryOp op, const Tensor& other, const char* name) {
  check_inplace(self, name);
  DDP_CHECK(other.defined(), "{}: the other tensor is undefined", name);
  DDP_CHECK_T(DeviceError, other.device() == self.device() || other.dim() == 0,
              "{}: {} and {} are on different devices", name, self.describe(), other.describe());
  DDP_CHECK_T(DTypeError, self.dtype() != DType::bool_, "{}: arithmetic on bool tensor {}", name,
              self.describe());
  autograd::NoGradGuard no_grad;
  Tensor b = broadcast_source(other.to(self.device(), self.dtype()), self.shape(), name);
  backend_for(self.device()).binary(op, self, b, self);
  return self;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  if (alpha == 1.0) return binary_inplace(*this, BinaryOp::add, other, "add_");
  Tensor scaled;
  {
    autograd::NoGradGuard no_grad;
    scaled = mul(other.to(device(), other.dtype()), alpha);
  }
  return binary_inplace(*this, BinaryOp::add, scaled, "add_");
}
Tensor& Tensor::mul_(const Tensor& other) { return binary_inplace(*this, BinaryOp::mul, other, "mul_"); }
Tensor& Tensor::div_(const Tensor& other) { return binary_inplace(*this, BinaryOp::div, other, "div_"); }
Tensor& Tensor::mul_(double value) {
  return binary_inplace(*this, BinaryOp::mul, Tensor::scalar(value, TensorOptions(dtype())), "mul_");
}

}  // namespace ddp
