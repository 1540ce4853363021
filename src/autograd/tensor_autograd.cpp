// The autograd methods of Tensor (declared in tensor.h). The autograd state
// lives in TensorImpl::autograd, created on first need so that tensors that
// never meet autograd (kernels' temporaries, data batches) carry none.

#include "ddp/autograd/engine.h"
#include "ddp/autograd/node.h"
#include "ddp/tensor/tensor.h"

namespace ddp {

namespace {

autograd::AutogradMeta& ensure_meta(const std::shared_ptr<TensorImpl>& impl) {
  if (!impl->autograd) impl->autograd = std::make_unique<autograd::AutogradMeta>();
  // See the comment on AutogradMeta::owner: the only place a shared_ptr to the
  // impl is at hand.
  if (impl->autograd->owner.expired()) impl->autograd->owner = impl;
  return *impl->autograd;
}

}  // namespace

bool Tensor::requires_grad() const {
  check_defined("requires_grad");
  return impl_->autograd && impl_->autograd->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  check_defined("set_requires_grad");
  DDP_CHECK(is_leaf(),
            "set_requires_grad: {} is not a leaf (it was computed by '{}'); use detach() to "
            "make a leaf",
            describe(), impl_->autograd->grad_fn->name());
  if (!requires_grad) {
    if (impl_->autograd) impl_->autograd->requires_grad = false;
    return *this;
  }
  DDP_CHECK_T(DTypeError, is_floating(dtype()),
              "set_requires_grad: only floating tensors can require grad, got {}", describe());
  ensure_meta(impl_).requires_grad = true;
  return *this;
}

bool Tensor::is_leaf() const {
  check_defined("is_leaf");
  return !impl_->autograd || !impl_->autograd->grad_fn;
}

Tensor Tensor::grad() const {
  check_defined("grad");
  return impl_->autograd ? impl_->autograd->grad : Tensor();
}

// The tensor is stored as is, not copied: the DDP engine points .grad at a
// view into its gradient bucket, and later accumulation writes through it
// (see Note [Gradient ownership] in node.cpp).
void Tensor::set_grad(const Tensor& grad) {
  check_defined("set_grad");
  if (!grad.defined()) {  // clears the gradient ("set to none")
    if (impl_->autograd) impl_->autograd->grad = Tensor();
    return;
  }
  DDP_CHECK_T(ShapeError, grad.shape() == shape(), "set_grad: gradient {} does not match {}",
              grad.describe(), describe());
  DDP_CHECK_T(DTypeError, grad.dtype() == dtype(), "set_grad: gradient {} does not match {}",
              grad.describe(), describe());
  DDP_CHECK_T(DeviceError, grad.device() == device(), "set_grad: gradient {} does not match {}",
              grad.describe(), describe());
  DDP_CHECK(!grad.is_same(*this), "set_grad: a tensor cannot be its own gradient ({})", describe());
  ensure_meta(impl_).grad = grad;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  check_defined("grad_fn");
  return impl_->autograd ? impl_->autograd->grad_fn : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  check_defined("backward");
  DDP_CHECK(requires_grad(),
            "backward: {} does not require grad and has no grad_fn (was it computed under "
            "NoGradGuard, or from tensors that do not require grad?)",
            describe());
  DDP_CHECK(gradient.defined() || numel() == 1,
            "backward: a gradient can be implied only for a one-element tensor; pass a "
            "gradient of shape {} for {}",
            shape_str(shape()), describe());
  autograd::backward({*this}, {gradient}, retain_graph);  // fills ones for a scalar
}

Tensor Tensor::detach() const {
  check_defined("detach");
  return Tensor(std::make_shared<TensorImpl>(impl_->storage, impl_->shape, impl_->strides,
                                             impl_->offset, impl_->dtype));
}

int Tensor::register_post_accumulate_grad_hook(std::function<void(Tensor&)> fn) {
  check_defined("register_post_accumulate_grad_hook");
  DDP_CHECK(is_leaf() && requires_grad(),
            "register_post_accumulate_grad_hook: {} is not a leaf that requires grad", describe());
  DDP_CHECK(fn != nullptr, "register_post_accumulate_grad_hook: empty function");
  autograd::AutogradMeta& meta = ensure_meta(impl_);
  int id = meta.next_hook_id++;
  meta.post_accumulate_hooks.emplace(id, std::move(fn));
  return id;
}

// Removing an unknown or already removed handle does nothing, so cleanup code
// need not track what it removed.
void Tensor::remove_post_accumulate_grad_hook(int handle) {
  check_defined("remove_post_accumulate_grad_hook");
  if (impl_->autograd) impl_->autograd->post_accumulate_hooks.erase(handle);
}

}  // namespace ddp
