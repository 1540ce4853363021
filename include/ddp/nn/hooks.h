#pragma once
// Forward hooks of nn::Module: functions that run before and after a
// module's forward, with PyTorch's register_forward_pre_hook /
// register_forward_hook semantics and a removable handle.
//
//   auto handle = model->layer1->register_forward_pre_hook(
//       [](nn::Module& m, Tensors& inputs) { std::puts(m.describe().c_str()); });
//   model->forward(x);      // prints "layer1 (Sequential)"
//   handle.remove();        // the next forward runs without it
//
// Note [Forward hooks]
// Hooks run when a module is called through its call operator, `(*m)(x)`,
// which is how every model and container in the library calls its children;
// a direct `m->forward(x)` runs the module alone, without its own hooks
// (as PyTorch's `m.forward(x)` does), but its children's still run.
//  - Pre-hooks run in registration order (prepend = true puts one first),
//    and may replace the inputs: the forward sees the vector as the last
//    pre-hook left it, which must keep its length.
//  - Post-hooks run after the forward, in the same order, see the inputs
//    the forward saw, and may replace the outputs: the caller gets what the
//    last one left.
//  - A hook registered or removed while the module runs takes effect at its
//    next call (the current call runs the hooks that were there when it
//    began). A hook that throws ends the call with its exception; the
//    remaining hooks do not run.
//  - A fused path that computes a module together with its neighbour
//    (BatchNorm2d::forward_add_relu, GPT's linear-GELU-linear MLP) runs the
//    pre-hooks of the modules it covers and stays fused; when one of them
//    has a post-hook, it runs unfused, so that the hook sees that module's
//    own output.
//  - Hooks are not state: state_dict, to() and checkpoints ignore them, and
//    no module is copied with them.
// The DDP engine uses pre-hooks to let each layer wait only for its own
// parameters (docs/ddp.md).

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "ddp/tensor/tensor.h"

namespace ddp::nn {

class Module;

// Before the forward: may replace elements of `inputs`.
using ForwardPreHook = std::function<void(Module& module, Tensors& inputs)>;
// After the forward: may replace elements of `outputs`.
using ForwardHook = std::function<void(Module& module, const Tensors& inputs, Tensors& outputs)>;

namespace detail {
struct ForwardHooks {
  uint64_t next_id = 0;
  std::vector<std::pair<uint64_t, ForwardPreHook>> pre;
  std::vector<std::pair<uint64_t, ForwardHook>> post;
};
}  // namespace detail

// Removes the hook it was returned for. Copies refer to the same hook;
// remove() is idempotent, and does nothing once the module is gone. Unlike
// a guard, destroying a handle leaves the hook in place (as in PyTorch).
class HookHandle {
 public:
  HookHandle() = default;
  void remove();
  // Whether the hook is still registered.
  bool active() const;

 private:
  friend class Module;
  HookHandle(std::weak_ptr<detail::ForwardHooks> hooks, uint64_t id)
      : hooks_(std::move(hooks)), id_(id) {}
  std::weak_ptr<detail::ForwardHooks> hooks_;
  uint64_t id_ = 0;
};

}  // namespace ddp::nn
