#pragma once
// Tensor: a strided view (shape, strides, offset, dtype) into a Storage, plus
// autograd state. Copying a Tensor copies a handle; both refer to the same
// data, like torch.Tensor in Python.

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ddp/core/device.h"
#include "ddp/core/dtype.h"
#include "ddp/core/error.h"
#include "ddp/tensor/storage.h"

namespace ddp {

using Shape = std::vector<int64_t>;

namespace autograd {
class Node;
struct AutogradMeta;
}  // namespace autograd

class Tensor;
using Tensors = std::vector<Tensor>;

// Options for factory functions: Tensor::zeros({2, 3}, TensorOptions().dtype(kFloat64)).
struct TensorOptions {
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
  bool requires_grad_ = false;
  bool dtype_set_ = false;  // from_vector<T> uses T's dtype unless one was given

  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d), dtype_set_(true) {}  // NOLINT: lets users pass a dtype
  TensorOptions(Device d) : device_(d) {}                  // NOLINT: or a device
  TensorOptions dtype(DType d) const { auto o = *this; o.dtype_ = d; o.dtype_set_ = true; return o; }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions requires_grad(bool r = true) const { auto o = *this; o.requires_grad_ = r; return o; }
};

struct TensorImpl {
  Storage storage;
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  std::unique_ptr<autograd::AutogradMeta> autograd;  // null until autograd touches it

  TensorImpl(Storage s, Shape sh, Shape st, int64_t off, DType dt);
  ~TensorImpl();
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories -------------------------------------------------------
  static Tensor empty(const Shape& shape, TensorOptions opts = {});
  static Tensor zeros(const Shape& shape, TensorOptions opts = {});
  static Tensor ones(const Shape& shape, TensorOptions opts = {});
  static Tensor full(const Shape& shape, double value, TensorOptions opts = {});
  static Tensor scalar(double value, TensorOptions opts = {});  // 0-dim
  // Copies host values into a new tensor of the given shape and options; the
  // dtype is T's unless opts names one.
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opts = {});
  // Wraps strides/offset over an existing storage (no copy).
  static Tensor from_storage(Storage storage, const Shape& shape, const Shape& strides,
                             int64_t offset, DType dtype);

  // ---- metadata --------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t size(int64_t dim) const;    // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t offset() const;
  int64_t dim() const;
  int64_t numel() const;
  size_t nbytes() const;  // numel * element size
  DType dtype() const;
  Device device() const;
  bool is_cuda() const { return device().is_cuda(); }
  bool is_contiguous() const;
  const Storage& storage() const;
  TensorImpl* impl() const { return impl_.get(); }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  // The storage's write count (Note [Tensor version counter] in storage.h),
  // shared with every view of it. bump_version() after writing through
  // data_ptr() into a tensor whose values something may have cached.
  uint64_t version() const;
  void bump_version() const;
  // "f32[2, 3] on cpu": used in every error message.
  std::string describe() const;
  std::string to_string() const;  // values (copied to the host), for debugging

  // Pointer to element 0 of this view. data<T>() also checks the dtype.
  void* data_ptr() const;
  template <class T> T* data() const;

  // ---- views (share storage) -------------------------------------------
  Tensor view(const Shape& shape) const;     // -1 infers one dim; needs compatible strides
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // drops dim
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a dim; new dims in front
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;  // itself when already contiguous

  // ---- copies and conversion -------------------------------------------
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype, bool non_blocking = false) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  Tensor clone() const;
  // Copies src into this view (broadcasting src, casting its dtype, across
  // devices). non_blocking copies between pinned host and GPU are async on
  // the current stream.
  Tensor& copy_(const Tensor& src, bool non_blocking = false);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  template <class T> T item() const;                 // numel must be 1
  template <class T> std::vector<T> to_vector() const;  // row-major, host copy

  // ---- in-place arithmetic (not recorded by autograd) ---------------------
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(const Tensor& other) { return add_(other, -1.0); }
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(const Tensor& other);

  // ---- autograd ---------------------------------------------------------
  bool requires_grad() const;
  Tensor& set_requires_grad(bool requires_grad = true);  // leaves only
  bool is_leaf() const;  // no grad_fn
  // The accumulated gradient of a leaf (undefined until a backward reaches it).
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  std::shared_ptr<autograd::Node> grad_fn() const;
  // Backward from this tensor: a scalar needs no gradient; otherwise pass one
  // of the same shape.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same data, no history
  // Registers fn to run right after this leaf's .grad has been accumulated
  // during backward; returns a handle id for remove_post_accumulate_grad_hook.
  int register_post_accumulate_grad_hook(std::function<void(Tensor&)> fn);
  void remove_post_accumulate_grad_hook(int handle);

 private:
  std::shared_ptr<TensorImpl> impl_;
  void check_defined(const char* op) const;
};

// Contiguous row-major strides for a shape.
Shape contiguous_strides(const Shape& shape);
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"
// Wraps a possibly negative dim into [0, ndim); throws IndexError naming op.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace ddp
