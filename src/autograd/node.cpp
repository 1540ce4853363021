// Graph nodes: the base Node, AccumulateGrad for leaves, and LambdaNode, the
// node record() creates around an op's backward lambda.

#include "ddp/autograd/node.h"

#include <atomic>
#include <utility>

#include "ddp/autograd/grad_mode.h"
#include "ddp/tensor/memory_format.h"

namespace ddp::autograd {

namespace {
// Note [Sequence numbers]
// One process-wide counter orders all nodes by creation. It is monotonic and
// only ever compared, never reset, so two models or two process groups in one
// process cannot disturb each other through it: each graph only needs its own
// nodes to be ordered, which any increasing counter provides.
std::atomic<uint64_t> g_next_sequence_nr{0};
}  // namespace

Node::Node(std::string name)
    : name_(std::move(name)),
      sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

// ---- AccumulateGrad ---------------------------------------------------------

AccumulateGrad::AccumulateGrad(std::weak_ptr<TensorImpl> leaf)
    : Node("AccumulateGrad"), leaf_(std::move(leaf)) {}

// Note [Gradient ownership]
// The first gradient that reaches a leaf is copied into a fresh buffer (in
// the leaf's layout) instead of being stored as is. The incoming tensor may alias other
// tensors: a backward formula may pass its grad_output straight through (add
// gives the same tensor to both inputs), the gradient may be the user's own
// root gradient, or an expanded (stride-0) view from sum's backward. Storing it
// would make two leaves share one .grad, and the in-place accumulation below
// would then write into all of them. Tensor exposes no handle count, so an
// unshared tensor cannot be told apart; the copy costs what one accumulation
// costs. Once .grad is defined it is only ever updated in place (add_), so a
// .grad that the user or the DDP engine set to a view into a bigger buffer
// (a gradient bucket) stays that view.
Tensors AccumulateGrad::apply(Tensors&& grad_outputs) {
  if (grad_outputs.empty() || !grad_outputs[0].defined()) return {};
  std::shared_ptr<TensorImpl> impl = leaf_.lock();
  if (!impl || !impl->autograd) return {};  // the leaf died: nobody can read its .grad
  Tensor leaf(impl);
  AutogradMeta& meta = *impl->autograd;
  const Tensor& incoming = grad_outputs[0];
  {
    NoGradGuard no_grad;  // accumulation is never part of a graph
    if (!meta.grad.defined()) {
      // In the leaf's own dense layout (a channels-last weight gets a
      // channels-last .grad): see Note [Memory-format propagation] in memory_format.h.
      Tensor fresh = empty_in_layout_of({leaf}, leaf.shape(),
                                        TensorOptions(leaf.dtype()).device(leaf.device()));
      fresh.copy_(incoming);
      meta.grad = fresh;
    } else {
      meta.grad.add_(incoming);
    }
    // Hooks run in id (registration) order. The ids are collected first and
    // each function is copied before the call, so a hook may remove itself or
    // others, or register new ones (which then wait for the next backward).
    std::vector<int> ids;
    ids.reserve(meta.post_accumulate_hooks.size());
    for (const auto& entry : meta.post_accumulate_hooks) ids.push_back(entry.first);
    for (int id : ids) {
      auto it = meta.post_accumulate_hooks.find(id);
      if (it == meta.post_accumulate_hooks.end()) continue;
      auto fn = it->second;
      fn(leaf);
    }
  }
  return {};
}

// ---- LambdaNode ---------------------------------------------------------------

namespace {

// What record() knows about one output: enough to make zeros for an output
// that received no gradient, without keeping the output alive (that would be
// a reference cycle output -> grad_fn -> output).
struct OutputMeta {
  Shape shape;
  DType dtype = DType::f32;
  Device device;
  bool differentiable = false;  // defined and floating
};

class LambdaNode final : public Node {
 public:
  LambdaNode(const char* name, BackwardFn fn, std::vector<OutputMeta> outputs)
      : Node(name), fn_(std::move(fn)), outputs_(std::move(outputs)) {
    set_num_outputs(int(outputs_.size()));
  }

  Tensors apply(Tensors&& grad_outputs) override {
    if (!fn_)
      DDP_THROW(Error,
                "autograd: tried to run the backward of '{}' a second time, but its saved "
                "tensors were freed after the first backward; pass retain_graph=true to the "
                "first backward to keep them",
                name());
    grad_outputs.resize(outputs_.size());
    for (size_t k = 0; k < outputs_.size(); ++k) {
      const OutputMeta& m = outputs_[k];
      if (!grad_outputs[k].defined() && m.differentiable)
        grad_outputs[k] = Tensor::zeros(m.shape, TensorOptions(m.dtype).device(m.device));
    }
    return fn_(grad_outputs);
  }

  // Dropping the lambda frees every tensor it captured.
  void release() override { fn_ = nullptr; }

  // Note [Iterative graph teardown]
  // Freeing the last node of a long chain would free its predecessor from
  // inside its destructor, and so on: one stack frame group per node, which
  // overflows for a graph of some ten thousand ops (an unrolled sequence). So
  // a dying node takes over the edges of every node it is the last owner of
  // and frees them one by one from a loop.
  ~LambdaNode() override {
    std::vector<std::shared_ptr<Node>> dying;
    auto take_edges = [&dying](std::vector<Edge>& edges) {
      for (Edge& e : edges)
        if (e.node && e.node.use_count() == 1) dying.push_back(std::move(e.node));
      edges.clear();
    };
    take_edges(mutable_next_edges());
    while (!dying.empty()) {
      std::shared_ptr<Node> n = std::move(dying.back());
      dying.pop_back();
      take_edges(n->mutable_next_edges());
    }  // n is freed here, with no edges left to recurse into
  }

 private:
  BackwardFn fn_;
  std::vector<OutputMeta> outputs_;
};

}  // namespace

// ---- recording ------------------------------------------------------------------

bool needs_grad(const Tensors& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  AutogradMeta* meta = t.impl()->autograd.get();
  if (!meta) return {};
  if (meta->grad_fn) return Edge{meta->grad_fn, meta->output_nr};
  if (!meta->requires_grad) return {};
  // A leaf: all its uses share one accumulator, held by the graph (the meta
  // keeps only a weak_ptr, so the accumulator dies with the last graph).
  std::shared_ptr<AccumulateGrad> acc = meta->grad_accumulator.lock();
  if (!acc) {
    std::shared_ptr<TensorImpl> owner = meta->owner.lock();
    if (!owner || owner.get() != t.impl())
      DDP_THROW(Error,
                "autograd: the autograd state of leaf {} was not created through "
                "Tensor::set_requires_grad, so it cannot get a gradient accumulator",
                t.describe());
    acc = std::make_shared<AccumulateGrad>(owner);
    meta->grad_accumulator = acc;
  }
  return Edge{acc, 0};
}

// See Note [Recording backward] in node.h.
void record(const char* name, const Tensors& inputs, const Tensors& outputs, BackwardFn fn) {
  if (!needs_grad(inputs)) return;
  for (const Tensor& out : outputs)
    for (const Tensor& in : inputs)
      if (out.defined() && out.is_same(in))
        DDP_THROW(Error,
                  "autograd: op '{}' returned its input {} itself as an output; a recorded "
                  "op must return a new tensor (a view is fine)",
                  name, in.describe());

  std::vector<OutputMeta> out_meta;
  out_meta.reserve(outputs.size());
  for (const Tensor& out : outputs) {
    OutputMeta m;
    if (out.defined()) {
      m.shape = out.shape();
      m.dtype = out.dtype();
      m.device = out.device();
      m.differentiable = is_floating(out.dtype());
    }
    out_meta.push_back(std::move(m));
  }
  auto node = std::make_shared<LambdaNode>(name, std::move(fn), std::move(out_meta));

  auto& edges = node->mutable_next_edges();
  auto& in_meta = node->mutable_input_meta();
  edges.reserve(inputs.size());
  in_meta.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    edges.push_back(gradient_edge(in));
    InputMeta m;
    if (in.defined()) {
      m.shape = in.shape();
      m.dtype = in.dtype();
      m.device = in.device();
      m.defined = true;
    }
    in_meta.push_back(std::move(m));
  }

  // Integer outputs (indices, masks) cannot carry a gradient: they stay
  // without history, as in torch.
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& out = outputs[k];
    if (!out.defined() || !is_floating(out.dtype())) continue;
    std::unique_ptr<AutogradMeta>& slot = out.impl()->autograd;
    if (!slot) slot = std::make_unique<AutogradMeta>();
    slot->grad_fn = node;
    slot->output_nr = int(k);
    slot->requires_grad = true;
  }
}

}  // namespace ddp::autograd
