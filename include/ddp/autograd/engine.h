#pragma once
// Runs backward over the graph recorded by ops.

#include <functional>

#include "ddp/autograd/node.h"

namespace ddp::autograd {

// Backpropagates `grad_roots` (one per root, same shapes) from `roots`.
// Nodes run in dependency order, ties broken by latest sequence number first.
// Unless retain_graph, saved tensors are released afterwards.
void backward(const Tensors& roots, const Tensors& grad_roots, bool retain_graph = false);

// Gradients of `outputs` with respect to `inputs` without touching .grad
// (like torch.autograd.grad). Undefined where an input is not reachable.
Tensors grad(const Tensors& outputs, const Tensors& inputs, const Tensors& grad_outputs,
             bool retain_graph = false);

// Queues fn to run once the backward pass that is running now has finished
// the whole graph, on the same thread, before backward() returns (like
// torch's Variable._execution_engine.queue_callback). Callbacks run in the
// order they were queued and may queue more. Only valid while a backward
// runs (from a hook or a node); ValueError otherwise. If the pass fails, its
// callbacks are dropped. The DDP engine uses this to wait for its gradient
// buckets at the end of backward.
void queue_callback(std::function<void()> fn);

}  // namespace ddp::autograd
