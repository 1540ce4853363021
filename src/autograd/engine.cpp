// The backward engine: one traversal serves backward() (accumulate into the
// leaves' .grad) and grad() (hand gradients back, leave .grad alone).

#include "ddp/autograd/engine.h"

#include <queue>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "ddp/autograd/grad_mode.h"
#include "ddp/tensor/ops.h"

namespace ddp::autograd {

namespace {

// Note [Ready order]
// A node is ready once every edge into it from the part of the graph being
// run has delivered (dependency counts from a DFS over next_edges). Among
// ready nodes the engine runs the latest-created first, so backward follows
// the reverse of the forward order. AccumulateGrad nodes go before all others:
// a leaf's accumulator may have been created long before the op that now
// feeds it (a parameter is used every iteration, its accumulator lives as
// long as any graph holds it), and the DDP engine relies on a parameter's
// post-accumulate hook firing as soon as its gradient is complete, not after
// the rest of the backward pass.
struct ReadyItem {
  bool accumulate;
  uint64_t sequence_nr;
  std::shared_ptr<Node> node;
};
struct RunsLater {
  bool operator()(const ReadyItem& a, const ReadyItem& b) const {
    return std::tie(a.accumulate, a.sequence_nr) < std::tie(b.accumulate, b.sequence_nr);
  }
};

struct GraphTask {
  bool retain_graph = false;
  std::unordered_map<Node*, int> dependencies;
  // Gradients arriving for each output of a node, summed as they arrive.
  std::unordered_map<Node*, Tensors> buffers;
  std::priority_queue<ReadyItem, std::vector<ReadyItem>, RunsLater> ready;

  // grad() only: where the gradient of each requested input arrives
  // (node, input_nr) -> result slot, and the nodes that must run to get there.
  bool capturing = false;
  std::unordered_map<Node*, std::vector<std::pair<int, size_t>>> captures;
  // Keeps the capture nodes alive: an input's accumulator may have been
  // created just now by gradient_edge(), and a freed node's address could be
  // reused by another node.
  std::vector<Edge> capture_edges;
  std::unordered_set<Node*> needed;
  Tensors results;

  // queue_callback(): run after the graph, in order.
  std::vector<std::function<void()>> callbacks;
};

// The pass running on this thread, for queue_callback(). A hook may start a
// nested backward; execute() saves and restores the outer one.
thread_local GraphTask* current_task = nullptr;

class CurrentTaskScope {
 public:
  explicit CurrentTaskScope(GraphTask* t) : prev_(current_task) { current_task = t; }
  ~CurrentTaskScope() { current_task = prev_; }
  CurrentTaskScope(const CurrentTaskScope&) = delete;
  CurrentTaskScope& operator=(const CurrentTaskScope&) = delete;

 private:
  GraphTask* prev_;
};

void accumulate_into(Tensor& slot, const Tensor& grad) {
  if (!grad.defined()) return;
  // Out of place: the first gradient may alias a tensor someone else holds
  // (see Note [Gradient ownership] in node.cpp).
  slot = slot.defined() ? add(slot, grad) : grad;
}

void push_ready(GraphTask& task, const std::shared_ptr<Node>& node) {
  bool acc = dynamic_cast<AccumulateGrad*>(node.get()) != nullptr;
  task.ready.push(ReadyItem{acc, node->sequence_nr(), node});
}

// Counts, for every node reachable from the roots, the edges into it, and
// returns the nodes in post-order (every node after all nodes below it).
// Iterative, so a very deep graph (a long unrolled loop) cannot overflow the
// stack.
std::vector<Node*> count_dependencies(GraphTask& task, const std::vector<Edge>& roots) {
  std::vector<Node*> post_order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack;  // node, next edge to look at
  for (const Edge& root : roots) {
    Node* r = root.node.get();
    if (!r || !seen.insert(r).second) continue;
    stack.emplace_back(r, 0);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      const auto& edges = node->next_edges();
      if (next == edges.size()) {
        post_order.push_back(node);
        stack.pop_back();
        continue;
      }
      Node* child = edges[next++].node.get();
      if (!child) continue;
      ++task.dependencies[child];
      if (seen.insert(child).second) stack.emplace_back(child, 0);
    }
  }
  return post_order;
}

// Note [Gradient checks]
// Every gradient a node returns is checked against the input it belongs to:
// the count must equal the number of inputs, and shape and device must match
// (ShapeError / DeviceError naming the node). A wrong backward formula is
// caught at the node that produced it, not three nodes later as a confusing
// broadcasting error. A dtype mismatch is cast instead (as torch does): mixed
// precision ops legitimately compute a gradient in the wider type.
void check_gradients(const Node& node, Tensors& grads) {
  const auto& edges = node.next_edges();
  if (grads.size() != edges.size())
    DDP_THROW(ShapeError, "autograd: the backward of '{}' returned {} gradients for {} inputs",
              node.name(), grads.size(), edges.size());
  const auto& meta = node.input_meta();
  if (meta.empty()) return;
  for (size_t i = 0; i < grads.size(); ++i) {
    Tensor& g = grads[i];
    if (!g.defined() || i >= meta.size() || !meta[i].defined) continue;
    const InputMeta& m = meta[i];
    if (g.shape() != m.shape)
      DDP_THROW(ShapeError,
                "autograd: the backward of '{}' returned a gradient of shape {} for input {} "
                "of shape {}",
                node.name(), shape_str(g.shape()), i, shape_str(m.shape));
    if (g.device() != m.device)
      DDP_THROW(DeviceError,
                "autograd: the backward of '{}' returned a gradient on {} for input {} on {}",
                node.name(), g.device().str(), i, m.device.str());
    if (g.dtype() != m.dtype && is_floating(m.dtype)) g = g.to(m.dtype);
  }
}

void deliver(GraphTask& task, const Edge& edge, Tensor&& grad) {
  Node* child = edge.node.get();
  Tensors& buf = task.buffers[child];
  if (buf.empty()) buf.resize(size_t(child->num_outputs()));
  DDP_CHECK(edge.input_nr >= 0 && edge.input_nr < int(buf.size()),
            "autograd: edge into '{}' names output {} of {}", child->name(), edge.input_nr,
            buf.size());
  accumulate_into(buf[size_t(edge.input_nr)], grad);
}

void run_node(GraphTask& task, const std::shared_ptr<Node>& node) {
  Node* n = node.get();
  Tensors inputs;
  if (auto it = task.buffers.find(n); it != task.buffers.end()) {
    inputs = std::move(it->second);
    task.buffers.erase(it);
  }
  inputs.resize(size_t(n->num_outputs()));

  if (task.capturing) {
    if (auto it = task.captures.find(n); it != task.captures.end())
      for (auto [input_nr, slot] : it->second)
        accumulate_into(task.results[slot], inputs[size_t(input_nr)]);
    if (!task.needed.count(n)) return;  // nothing requested lies below it
  }

  // A node all of whose gradients are missing would only turn zeros into
  // zeros (backward is linear): skip it and send nothing on.
  bool any = false;
  for (const Tensor& g : inputs) any = any || g.defined();
  Tensors grads;
  if (any) {
    grads = n->apply(std::move(inputs));
    if (!task.retain_graph) n->release();
    check_gradients(*n, grads);
  } else {
    if (!task.retain_graph) n->release();
    grads.resize(n->next_edges().size());
  }

  const auto& edges = n->next_edges();
  for (size_t i = 0; i < edges.size(); ++i) {
    const Edge& e = edges[i];
    Node* child = e.node.get();
    if (!child) continue;
    if (task.capturing && !task.needed.count(child) && !task.captures.count(child)) continue;
    deliver(task, e, std::move(grads[i]));
    if (--task.dependencies[child] == 0) push_ready(task, e.node);
  }
}

// Shared by backward() and grad(): checks the roots, seeds their gradients
// and runs the graph.
void execute(GraphTask& task, const Tensors& roots, const Tensors& grad_roots, const char* api) {
  DDP_CHECK(roots.size() == grad_roots.size(), "{}: got {} roots but {} root gradients", api,
            roots.size(), grad_roots.size());
  DDP_CHECK(!roots.empty(), "{}: no roots given", api);
  NoGradGuard no_grad;  // nothing the engine computes is recorded

  std::vector<Edge> root_edges;
  Tensors seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    DDP_CHECK(r.defined(), "{}: root {} is undefined", api, i);
    Edge e = gradient_edge(r);
    DDP_CHECK(e.node != nullptr, "{}: root {} ({}) does not require grad and has no grad_fn", api,
              i, r.describe());
    Tensor g = grad_roots[i];
    if (!g.defined()) {
      DDP_CHECK(r.numel() == 1,
                "{}: a gradient can be implied only for a one-element root; root {} is {}", api, i,
                r.describe());
      g = Tensor::ones(r.shape(), TensorOptions(r.dtype()).device(r.device()));
    }
    DDP_CHECK_T(ShapeError, g.shape() == r.shape(), "{}: gradient {} does not match root {} {}",
                api, g.describe(), i, r.describe());
    DDP_CHECK_T(DeviceError, g.device() == r.device(),
                "{}: gradient {} is not on the device of root {} {}", api, g.describe(), i,
                r.describe());
    if (g.dtype() != r.dtype()) g = g.to(r.dtype());
    root_edges.push_back(e);
    seeds.push_back(g);
  }

  std::vector<Node*> post_order = count_dependencies(task, root_edges);
  if (task.capturing) {
    // A node must run when some requested gradient arrives below it.
    for (Node* n : post_order)
      for (const Edge& e : n->next_edges()) {
        Node* c = e.node.get();
        if (c && (task.captures.count(c) || task.needed.count(c))) {
          task.needed.insert(n);
          break;
        }
      }
  }

  for (size_t i = 0; i < root_edges.size(); ++i) deliver(task, root_edges[i], std::move(seeds[i]));
  std::unordered_set<Node*> pushed;
  for (const Edge& e : root_edges)
    if (task.dependencies[e.node.get()] == 0 && pushed.insert(e.node.get()).second)
      push_ready(task, e.node);

  CurrentTaskScope scope(&task);
  while (!task.ready.empty()) {
    std::shared_ptr<Node> node = task.ready.top().node;
    task.ready.pop();
    run_node(task, node);
  }
  // Indexing, not iterators: a callback may queue another.
  for (size_t i = 0; i < task.callbacks.size(); ++i) {
    std::function<void()> fn = std::move(task.callbacks[i]);
    fn();
  }
}

}  // namespace

void backward(const Tensors& roots, const Tensors& grad_roots, bool retain_graph) {
  GraphTask task;
  task.retain_graph = retain_graph;
  execute(task, roots, grad_roots, "backward");
}

void queue_callback(std::function<void()> fn) {
  DDP_CHECK_T(ValueError, current_task != nullptr,
              "queue_callback: no backward pass is running on this thread");
  DDP_CHECK_T(ValueError, fn != nullptr, "queue_callback: empty function");
  current_task->callbacks.push_back(std::move(fn));
}

Tensors grad(const Tensors& outputs, const Tensors& inputs, const Tensors& grad_outputs,
             bool retain_graph) {
  GraphTask task;
  task.retain_graph = retain_graph;
  task.capturing = true;
  task.results.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    DDP_CHECK(x.defined(), "grad: input {} is undefined", i);
    Edge e = gradient_edge(x);
    DDP_CHECK(e.node != nullptr, "grad: input {} ({}) does not require grad", i, x.describe());
    task.captures[e.node.get()].emplace_back(e.input_nr, i);
    task.capture_edges.push_back(std::move(e));
  }
  // grad_outputs may be left empty when every output has one element.
  Tensors seeds = grad_outputs.empty() ? Tensors(outputs.size()) : grad_outputs;
  execute(task, outputs, seeds, "grad");
  return std::move(task.results);
}

}  // namespace ddp::autograd
