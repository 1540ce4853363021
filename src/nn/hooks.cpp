// Forward hooks of nn::Module; Note [Forward hooks] in ddp/nn/hooks.h.

#include "ddp/nn/hooks.h"

#include <algorithm>

#include "ddp/core/error.h"
#include "ddp/nn/module.h"

namespace ddp::nn {

namespace {

template <class List>
bool erase_id(List& list, uint64_t id) {
  auto it = std::find_if(list.begin(), list.end(), [id](const auto& e) { return e.first == id; });
  if (it == list.end()) return false;
  list.erase(it);
  return true;
}

template <class List>
bool has_id(const List& list, uint64_t id) {
  return std::any_of(list.begin(), list.end(), [id](const auto& e) { return e.first == id; });
}

template <class List, class Hook>
uint64_t insert(detail::ForwardHooks& hooks, List& list, Hook hook, bool prepend) {
  const uint64_t id = hooks.next_id++;
  if (prepend)
    list.insert(list.begin(), {id, std::move(hook)});
  else
    list.push_back({id, std::move(hook)});
  return id;
}

}  // namespace

void HookHandle::remove() {
  if (auto hooks = hooks_.lock()) erase_id(hooks->pre, id_) || erase_id(hooks->post, id_);
  hooks_.reset();
}

bool HookHandle::active() const {
  auto hooks = hooks_.lock();
  return hooks && (has_id(hooks->pre, id_) || has_id(hooks->post, id_));
}

HookHandle Module::register_forward_pre_hook(ForwardPreHook hook, bool prepend) {
  DDP_CHECK_T(ValueError, hook != nullptr, "{}.register_forward_pre_hook: the hook is empty",
              describe());
  if (!hooks_) hooks_ = std::make_shared<detail::ForwardHooks>();
  return HookHandle(hooks_, insert(*hooks_, hooks_->pre, std::move(hook), prepend));
}

HookHandle Module::register_forward_hook(ForwardHook hook, bool prepend) {
  DDP_CHECK_T(ValueError, hook != nullptr, "{}.register_forward_hook: the hook is empty",
              describe());
  if (!hooks_) hooks_ = std::make_shared<detail::ForwardHooks>();
  return HookHandle(hooks_, insert(*hooks_, hooks_->post, std::move(hook), prepend));
}

void Module::run_forward_pre_hooks(Tensors& inputs) {
  if (!has_forward_pre_hooks()) return;
  // A copy: hooks that register or remove hooks change the next call only.
  const auto pre = hooks_->pre;
  const size_t n = inputs.size();
  for (const auto& [id, hook] : pre) {
    hook(*this, inputs);
    DDP_CHECK_T(ValueError, inputs.size() == n,
                "{}: a forward pre-hook changed the number of inputs from {} to {}", describe(),
                n, inputs.size());
  }
}

Tensors Module::call_with_hooks(Tensors inputs,
                                const std::function<Tensors(const Tensors&)>& forward) {
  run_forward_pre_hooks(inputs);
  Tensors outputs = forward(inputs);
  if (!has_forward_hooks()) return outputs;
  const auto post = hooks_->post;
  const size_t n = outputs.size();
  for (const auto& [id, hook] : post) {
    hook(*this, inputs, outputs);
    DDP_CHECK_T(ValueError, outputs.size() == n,
                "{}: a forward hook changed the number of outputs from {} to {}", describe(), n,
                outputs.size());
  }
  return outputs;
}

}  // namespace ddp::nn
