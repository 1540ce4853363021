#pragma once
// Runs backward over the graph recorded by ops.

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

}  // namespace ddp::autograd
