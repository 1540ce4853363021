#pragma once
// nn::Module: the base of every layer and model. A module owns named
// parameters, buffers and submodules, registered by name in order, so that a
// model's tensors have PyTorch's names ("layer1.0.conv1.weight",
// "bn1.running_mean") and order, and state dicts and checkpoints interoperate
// with PyTorch's.
//
// Note [Forward convention]
// Module itself has no forward(): layers differ in what they take and return
// (a loss takes two tensors, an attention block a mask). A module with one
// tensor in and one out derives from UnaryModule and implements
// `Tensor forward(const Tensor&)`; only those can be chained by Sequential.
// Other modules declare the forward() they need; nothing calls it generically.
//
// Note [Parameter identity]
// A registered tensor is the same object (TensorImpl) for the module's whole
// life. Layers keep handles to their parameters as members (Linear::weight),
// optimizers and the DDP engine keep handles too, and autograd hooks hang on
// the TensorImpl. So to(), to(dtype) and load_state_dict() never replace a
// registered tensor: load_state_dict copies into it, and to() re-points the
// TensorImpl at the converted storage (as PyTorch's `param.data = ...` does),
// converting an existing .grad too. A parameter stays a leaf that requires
// grad.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "ddp/nn/hooks.h"
#include "ddp/nn/ordered_dict.h"
#include "ddp/tensor/memory_format.h"
#include "ddp/tensor/tensor.h"

namespace ddp::nn {

// What load_state_dict(dict, strict = false) did not match: keys the module
// has that the dict lacks, and keys of the dict the module does not have.
struct LoadResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
  bool ok() const { return missing_keys.empty() && unexpected_keys.empty(); }
};

class Module {
 public:
  // `name` is the type name used in messages and to_string(): "Linear".
  explicit Module(std::string name);
  virtual ~Module() = default;
  // A module is a node of one tree and owns its tensors; copying one would
  // leave two modules sharing parameters by accident. Hold them by shared_ptr.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- names -------------------------------------------------------------
  const std::string& name() const { return name_; }
  // Where this module sits in the tree it was last registered into, as a
  // dotted path from the root ("layer3.2.conv2"); empty for a root.
  const std::string& path() const { return path_; }
  // For error messages: "layer3.2.conv2 (Conv2d)", or "Conv2d" for a root.
  std::string describe() const;

  // ---- registration --------------------------------------------------------
  // Names are non-empty, contain no '.', and are unique within one module
  // across parameters, buffers and submodules (ValueError otherwise). Each
  // returns what it registered, so a layer can write
  //   weight_ = register_parameter("weight", Tensor::empty({out, in}));
  //
  // A parameter must be a leaf; it is marked requires_grad(requires_grad)
  // (floating tensors only when true). An undefined tensor registers the name
  // with no tensor (an absent bias), skipped by parameters() and state_dict().
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  // A buffer is module state that is not trained (running statistics, step
  // counters). Persistent buffers are part of state_dict(); all buffers move
  // with to().
  Tensor register_buffer(const std::string& name, Tensor tensor, bool persistent = true);
  // Adds a submodule and sets the paths of its whole subtree under this one.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: M must derive from nn::Module");
    register_module_impl(name, module);
    return module;
  }

  // ---- lookup by dotted path ("layer1.0.conv1.weight") -----------------------
  // A missing name raises ValueError naming the path and this module.
  Module& submodule(const std::string& path);  // "" is this module
  Tensor parameter(const std::string& path) const;
  Tensor buffer(const std::string& path) const;

  // ---- traversal -------------------------------------------------------------
  // Pre-order: a module's own tensors, then each child's in registration
  // order. A tensor or module reachable twice (tied weights, a shared block)
  // is listed once, under its first name, so an optimizer steps it once.
  Tensors parameters(bool recurse = true) const;
  TensorDict named_parameters(bool recurse = true) const;
  Tensors buffers(bool recurse = true) const;
  TensorDict named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  OrderedDict<std::shared_ptr<Module>> named_children() const;
  // This module (named "") and all below it, pre-order.
  OrderedDict<Module*> named_modules();
  std::vector<Module*> modules();
  // Calls fn on every submodule (children before parents, like torch's
  // Module.apply), then on this module.
  void apply(const std::function<void(Module&)>& fn);
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- mode and placement ----------------------------------------------------
  // Sets training mode on this module and all below it.
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter and buffer (with their gradients); see
  // Note [Parameter identity]. to(dtype) converts floating tensors only, so
  // integer buffers keep their dtype, and dtype must be floating
  // (DTypeError otherwise).
  Module& to(Device device);
  Module& to(DType dtype);
  Module& to(Device device, DType dtype);
  // Re-lays every floating 4-D parameter and buffer (and its .grad) out in
  // `format`, like torch's model.to(memory_format=...): with channels_last
  // a conv weight [O, I, KH, KW] gets NHWC strides, so a channels-last
  // model's convolutions read x, w and y all NHWC and copy nothing (Note
  // [cuDNN convolution], Note [oneDNN layouts]). Values, shapes and
  // identities are kept (Note [Parameter identity]). Such a model trains
  // under DistributedDataParallel and ZeRO-1 as it is (Note [Dense tensors
  // in collectives]). Other tensors are left as they are.
  Module& to(MemoryFormat format);
  // Clears (set_to_none) or zeroes every parameter's gradient.
  void zero_grad(bool set_to_none = true);

  // ---- state ------------------------------------------------------------------
  // Parameters and persistent buffers by full name, in traversal order but
  // without deduplication (a tied weight appears under each of its names,
  // as in PyTorch). The tensors are detached but share storage with the
  // module's.
  TensorDict state_dict() const;
  // Copies values into the registered tensors in place, converting dtype and
  // device. A shape mismatch is always an error (ShapeError); with strict,
  // missing and unexpected keys are errors too (ValueError). The message
  // lists every missing, unexpected and mis-shaped key (with both shapes).
  // Everything is checked before anything is copied, so a failed load
  // leaves the module unchanged.
  LoadResult load_state_dict(const TensorDict& state, bool strict = true);

  // ---- forward hooks (Note [Forward hooks] in ddp/nn/hooks.h) ------------------
  // A null hook is a ValueError.
  HookHandle register_forward_pre_hook(ForwardPreHook hook, bool prepend = false);
  HookHandle register_forward_hook(ForwardHook hook, bool prepend = false);
  bool has_forward_pre_hooks() const { return hooks_ && !hooks_->pre.empty(); }
  bool has_forward_hooks() const { return hooks_ && !hooks_->post.empty(); }
  // Runs this module's pre-hooks on `inputs`, forward(inputs), then its
  // post-hooks on the outputs: what a call operator does. Modules whose
  // forward takes other arguments call it with a lambda over them.
  Tensors call_with_hooks(Tensors inputs, const std::function<Tensors(const Tensors&)>& forward);
  // The pre-hooks alone, for a fused path (Note [Forward hooks]).
  void run_forward_pre_hooks(Tensors& inputs);

  // ---- printing ---------------------------------------------------------------
  // The tree, like PyTorch's repr: "Sequential(\n  (0): Linear(in=4, out=8)\n)".
  std::string to_string() const;
  // What goes inside the parentheses of this module's line.
  virtual std::string extra_repr() const { return ""; }

 private:
  struct Slot {
    Tensor tensor;
    bool persistent = true;  // buffers only
  };
  void register_module_impl(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name, const char* what) const;
  void set_path(const std::string& path);
  void convert(std::optional<Device> device, std::optional<DType> dtype);
  const Module* find_owner(const std::string& path, std::string* leaf) const;
  // Calls fn(prefix, module) on this module and, pre-order, all below it;
  // with dedup a module reached twice is visited once.
  using Visitor = std::function<void(const std::string& prefix, const Module& m)>;
  void walk(const std::string& prefix, bool dedup, std::unordered_set<const Module*>& seen,
            const Visitor& fn) const;
  // Full name -> tensor of the parameters and/or buffers, in traversal order.
  struct Select {
    bool params = false, buffers = false, recurse = true, dedup = true, persistent_only = false;
  };
  TensorDict collect(const Select& what) const;
  bool contains_module(const Module* m) const;
  void repr_into(std::string& out, int indent) const;

  std::string name_;
  std::string path_;
  bool training_ = true;
  OrderedDict<Slot> parameters_;
  OrderedDict<Slot> buffers_;
  OrderedDict<std::shared_ptr<Module>> children_;
  std::shared_ptr<detail::ForwardHooks> hooks_;  // created by the first registration
};

// A module with one tensor in and one out; see Note [Forward convention].
class UnaryModule : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x) = 0;
  // forward(x) with this module's hooks (Note [Forward hooks]).
  Tensor operator()(const Tensor& x) {
    if (!has_forward_pre_hooks() && !has_forward_hooks()) return forward(x);
    return call_with_hooks({x}, [this](const Tensors& in) { return Tensors{forward(in[0])}; })[0];
  }
};

}  // namespace ddp::nn
