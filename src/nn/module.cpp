// nn::Module: registration, names and paths, traversal, mode and placement,
// printing. state_dict() and load_state_dict() are in state_dict.cpp.

#include "ddp/nn/module.h"

#include <optional>
#include <unordered_set>

#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/functional/conv.h"

namespace ddp::nn {

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Converts one registered tensor in place; see Note [Parameter identity].
// The TensorImpl keeps its autograd state (requires_grad, hooks, the grad
// accumulator that graphs point at) and only its data moves: the storage,
// strides and dtype of a converted copy are swapped in. An existing
// gradient is converted the same way, so set_grad's checks still hold.
void convert_in_place(const Tensor& t, Device device, std::optional<DType> dtype) {
  DType target = dtype && is_floating(t.dtype()) ? *dtype : t.dtype();
  if (t.device() == device && t.dtype() == target) return;
  Tensor data, grad = t.grad();
  {
    NoGradGuard no_grad;
    data = t.detach().to(device, target);
    if (grad.defined()) grad = grad.detach().to(device, target);
  }
  TensorImpl* impl = t.impl();
  impl->storage = data.storage();
  impl->shape = data.shape();
  impl->strides = data.strides();
  impl->offset = data.offset();
  impl->dtype = data.dtype();
  if (grad.defined()) Tensor(t).set_grad(grad);
}

// The same swap for a layout change (Module::to(MemoryFormat)).
void relayout_in_place(const Tensor& t, MemoryFormat format) {
  if (t.dim() != 4 || !is_floating(t.dtype())) return;
  auto relaid = [format](const Tensor& x) {
    return format == MemoryFormat::channels_last ? functional::to_channels_last(x)
                                                 : x.contiguous();
  };
  Tensor data, grad = t.grad();
  {
    NoGradGuard no_grad;
    data = relaid(t.detach());
    if (grad.defined() && grad.dim() == 4) grad = relaid(grad.detach());
  }
  if (data.storage().is_same(t.storage()) && !grad.defined()) return;  // already in format
  TensorImpl* impl = t.impl();
  impl->storage = data.storage();
  impl->strides = data.strides();
  impl->offset = data.offset();
  if (grad.defined()) Tensor(t).set_grad(grad);
}

}  // namespace

Module::Module(std::string name) : name_(std::move(name)) {
  DDP_CHECK(!name_.empty(), "Module: the type name must not be empty");
}

std::string Module::describe() const {
  return path_.empty() ? name_ : fmt::format("{} ({})", path_, name_);
}

// ---- registration -------------------------------------------------------------

void Module::check_new_name(const std::string& name, const char* what) const {
  DDP_CHECK(!name.empty(), "{}: {}: empty name", describe(), what);
  DDP_CHECK(name.find('.') == std::string::npos,
            "{}: {}: name '{}' must not contain '.' (dots separate the levels of a path)",
            describe(), what, name);
  const char* taken = parameters_.contains(name) ? "a parameter"
                      : buffers_.contains(name)  ? "a buffer"
                      : children_.contains(name) ? "a submodule"
                                                 : nullptr;
  DDP_CHECK(taken == nullptr, "{}: {}: '{}' is already {} of this module", describe(), what, name,
            taken);
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "register_parameter");
  if (tensor.defined()) {
    DDP_CHECK(tensor.is_leaf(),
              "{}: register_parameter: '{}' ({}) is not a leaf; register a detach()ed tensor",
              describe(), name, tensor.describe());
    DDP_CHECK_T(DTypeError, !requires_grad || is_floating(tensor.dtype()),
                "{}: register_parameter: '{}' is {}, but only floating tensors can require grad",
                describe(), name, tensor.describe());
    tensor.set_requires_grad(requires_grad);
  }
  parameters_.insert(name, Slot{tensor, true});
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor, bool persistent) {
  check_new_name(name, "register_buffer");
  buffers_.insert(name, Slot{tensor, persistent});
  return tensor;
}

bool Module::contains_module(const Module* m) const {
  if (m == this) return true;
  for (const auto& [n, c] : children_)
    if (c->contains_module(m)) return true;
  return false;
}

void Module::register_module_impl(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "register_module");
  DDP_CHECK(module != nullptr, "{}: register_module: '{}' is null", describe(), name);
  DDP_CHECK(!module->contains_module(this),
            "{}: register_module: '{}' ({}) contains this module; a module tree has no cycles",
            describe(), name, module->name());
  module->set_path(join(path_, name));
  children_.insert(name, std::move(module));
}

// Note [Module paths]
// A module learns its place when it is registered, so a layer's errors can
// name "layer3.2.conv2" without a parent pointer (which would make the tree
// cyclic). Modules are usually built bottom-up (a block builds its convs,
// then is registered into a stage), so registering re-prefixes the whole
// subtree. A module shared between two places keeps the last path.
void Module::set_path(const std::string& path) {
  path_ = path;
  for (auto& [n, c] : children_) c->set_path(join(path_, n));
}

// ---- lookup -------------------------------------------------------------------

Module& Module::submodule(const std::string& path) {
  Module* m = this;
  size_t start = 0;
  while (start < path.size()) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    std::shared_ptr<Module>* child = m->children_.find(part);
    if (!child)
      DDP_THROW(ValueError, "{}: no submodule '{}' (at '{}'; children of {}: [{}])", describe(),
                path, part, m->describe(), fmt::join(m->children_.keys(), ", "));
    m = child->get();
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return *m;
}

const Module* Module::find_owner(const std::string& path, std::string* leaf) const {
  size_t dot = path.rfind('.');
  *leaf = dot == std::string::npos ? path : path.substr(dot + 1);
  if (dot == std::string::npos) return this;
  // submodule() does not modify; it is non-const only because it hands out
  // a mutable reference.
  return &const_cast<Module*>(this)->submodule(path.substr(0, dot));
}

Tensor Module::parameter(const std::string& path) const {
  std::string leaf;
  const Module* owner = find_owner(path, &leaf);
  const Slot* s = owner->parameters_.find(leaf);
  if (!s)
    DDP_THROW(ValueError, "{}: no parameter '{}' (parameters of {}: [{}])", describe(), path,
              owner->describe(), fmt::join(owner->parameters_.keys(), ", "));
  return s->tensor;
}

Tensor Module::buffer(const std::string& path) const {
  std::string leaf;
  const Module* owner = find_owner(path, &leaf);
  const Slot* s = owner->buffers_.find(leaf);
  if (!s)
    DDP_THROW(ValueError, "{}: no buffer '{}' (buffers of {}: [{}])", describe(), path,
              owner->describe(), fmt::join(owner->buffers_.keys(), ", "));
  return s->tensor;
}

// ---- traversal ----------------------------------------------------------------

void Module::walk(const std::string& prefix, bool dedup, std::unordered_set<const Module*>& seen,
                  const Visitor& fn) const {
  if (dedup && !seen.insert(this).second) return;
  fn(prefix, *this);
  for (const auto& [n, c] : children_) c->walk(join(prefix, n), dedup, seen, fn);
}

TensorDict Module::collect(const Select& what) const {
  TensorDict out;
  std::unordered_set<const TensorImpl*> seen_tensors;
  auto add = [&](const std::string& prefix, const OrderedDict<Slot>& slots) {
    for (const auto& [n, slot] : slots) {
      if (!slot.tensor.defined() || (what.persistent_only && !slot.persistent)) continue;
      if (what.dedup && !seen_tensors.insert(slot.tensor.impl()).second) continue;
      out.insert(join(prefix, n), slot.tensor);
    }
  };
  auto visit = [&](const std::string& prefix, const Module& m) {
    if (what.params) add(prefix, m.parameters_);
    if (what.buffers) add(prefix, m.buffers_);
  };
  if (!what.recurse) {
    visit("", *this);
    return out;
  }
  std::unordered_set<const Module*> seen;
  walk("", what.dedup, seen, visit);
  return out;
}

TensorDict Module::named_parameters(bool recurse) const {
  return collect({.params = true, .recurse = recurse});
}
Tensors Module::parameters(bool recurse) const { return named_parameters(recurse).values(); }
TensorDict Module::named_buffers(bool recurse) const {
  return collect({.buffers = true, .recurse = recurse});
}
Tensors Module::buffers(bool recurse) const { return named_buffers(recurse).values(); }

OrderedDict<std::shared_ptr<Module>> Module::named_children() const { return children_; }
std::vector<std::shared_ptr<Module>> Module::children() const { return children_.values(); }

OrderedDict<Module*> Module::named_modules() {
  OrderedDict<Module*> out;
  std::unordered_set<const Module*> seen;
  // The tree is reached through this non-const module, so handing out
  // mutable pointers is sound.
  walk("", true, seen, [&](const std::string& prefix, const Module& m) {
    out.insert(prefix, const_cast<Module*>(&m));
  });
  return out;
}

std::vector<Module*> Module::modules() { return named_modules().values(); }

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [n, c] : children_) c->apply(fn);
  fn(*this);
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

// ---- mode and placement -------------------------------------------------------

Module& Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
  return *this;
}

// All three forms convert each tensor with convert_in_place; `device`
// unset keeps each tensor on its own device (a module split across devices
// keeps its placement when only the dtype changes).
void Module::convert(std::optional<Device> device, std::optional<DType> dtype) {
  DDP_CHECK_T(DTypeError, !dtype || is_floating(*dtype),
              "{}: to: modules convert to floating dtypes only, got {} (integer buffers keep "
              "their dtype)",
              describe(), dtype_name(*dtype));
  for (const auto& [n, t] : collect({.params = true, .buffers = true}))
    convert_in_place(t, device.value_or(t.device()), dtype);
}

Module& Module::to(Device device) {
  convert(device, std::nullopt);
  return *this;
}
Module& Module::to(DType dtype) {
  convert(std::nullopt, dtype);
  return *this;
}
Module& Module::to(Device device, DType dtype) {
  convert(device, dtype);
  return *this;
}

Module& Module::to(MemoryFormat format) {
  for (const auto& [n, t] : collect({.params = true, .buffers = true}))
    relayout_in_place(t, format);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      g.zero_();
  }
}

// ---- printing -----------------------------------------------------------------

void Module::repr_into(std::string& out, int indent) const {
  out += name_ + "(" + extra_repr();
  if (!children_.empty()) {
    std::string pad(size_t(indent + 2), ' ');
    out += "\n";
    for (const auto& [n, c] : children_) {
      out += pad + "(" + n + "): ";
      c->repr_into(out, indent + 2);
      out += "\n";
    }
    out += std::string(size_t(indent), ' ');
  }
  out += ")";
}

std::string Module::to_string() const {
  std::string out;
  repr_into(out, 0);
  return out;
}

}  // namespace ddp::nn
