#pragma once
// The backward graph.
//
// Note [Recording backward]
// An op that needs history calls record() with its inputs, its outputs and a
// lambda that maps the gradients of the outputs to the gradients of the inputs.
// The lambda must capture the tensors it needs via detach() (never the outputs
// themselves), so the graph holds no reference cycle.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ddp/tensor/tensor.h"

namespace ddp::autograd {

class Node;

// Shape, dtype and device of one input of a node, recorded with it so the
// engine can check the gradients apply() returns (see Note [Gradient checks]
// in engine.cpp). defined = false: the input was an undefined tensor.
struct InputMeta {
  Shape shape;
  DType dtype = DType::f32;
  Device device;
  bool defined = false;
};

// One input of a node's backward: which node receives the gradient, and
// which of that node's outputs it belongs to.
struct Edge {
  std::shared_ptr<Node> node;  // null: the input needs no gradient
  int input_nr = 0;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(std::string name);
  virtual ~Node() = default;
  // Gradients of this node's outputs in, gradients for next_edges() out
  // (same count as next_edges(); undefined tensors for "no gradient").
  virtual Tensors apply(Tensors&& grad_outputs) = 0;
  // Drops saved tensors after a backward without retain_graph.
  virtual void release() {}

  const std::string& name() const { return name_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  std::vector<Edge>& mutable_next_edges() { return next_edges_; }
  // Parallel to next_edges(), or empty when the node does not describe its
  // inputs (then the engine checks only the number of gradients).
  const std::vector<InputMeta>& input_meta() const { return input_meta_; }
  std::vector<InputMeta>& mutable_input_meta() { return input_meta_; }
  int num_outputs() const { return num_outputs_; }
  void set_num_outputs(int n) { num_outputs_ = n; }
  // Creation order; the engine runs later nodes first (so backward follows
  // the reverse of the forward order, which the DDP engine relies on).
  uint64_t sequence_nr() const { return sequence_nr_; }

 private:
  std::string name_;
  std::vector<Edge> next_edges_;
  std::vector<InputMeta> input_meta_;
  int num_outputs_ = 1;
  uint64_t sequence_nr_;
};

// The node at the end of every path into a leaf: adds the incoming gradient
// to leaf.grad, then runs the leaf's post-accumulate hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::weak_ptr<TensorImpl> leaf);
  Tensors apply(Tensors&& grad_outputs) override;

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// Per-tensor autograd state (TensorImpl::autograd).
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  int output_nr = 0;              // which output of grad_fn this tensor is
  std::weak_ptr<AccumulateGrad> grad_accumulator;  // leaves: shared by all uses
  std::map<int, std::function<void(Tensor&)>> post_accumulate_hooks;
  int next_hook_id = 0;
  // The TensorImpl this meta belongs to, so that gradient_edge() can give a
  // leaf's AccumulateGrad a weak_ptr to it (Tensor exposes only a raw impl
  // pointer). Set by Tensor's autograd methods when they create the meta.
  std::weak_ptr<TensorImpl> owner;
};

using BackwardFn = std::function<Tensors(const Tensors& grad_outputs)>;

// Records backward for `outputs` computed from `inputs` when grad mode is on
// and any input requires a gradient; otherwise does nothing. grad_outputs
// given to fn has one entry per output (zeros where an output got no
// gradient); fn returns one entry per input (undefined = none).
void record(const char* name, const Tensors& inputs, const Tensors& outputs, BackwardFn fn);
// True when record() would record for these inputs.
bool needs_grad(const Tensors& inputs);

// The edge that a gradient for `t` flows into: its grad_fn, or its leaf
// accumulator (created on demand), or none.
Edge gradient_edge(const Tensor& t);

}  // namespace ddp::autograd
