// The Reducer: gradient buckets, readiness hooks, launch in order, and the
// wait at the end of backward. See the Notes in reducer.h.

#include "ddp/parallel/reducer.h"

#include "parallel/reducer_bucket.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_set>

#include "ddp/autograd/engine.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/autograd/node.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/dist/flight_recorder.h"
#include "ddp/tensor/dense_layout.h"
#include "ddp/tensor/memory_format.h"
#include "ddp/tensor/ops.h"

namespace ddp::parallel {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

size_t mib_to_bytes(double mb) { return size_t(mb * kMiB); }

// Names of parameters, "a, b, c" (at most 10, then "and N more").
std::string list_names(const std::vector<std::string>& names, const std::vector<size_t>& which) {
  std::string out;
  for (size_t k = 0; k < which.size() && k < 10; ++k) {
    if (k) out += ", ";
    out += "'" + names[which[k]] + "'";
  }
  if (which.size() > 10) out += fmt::format(" and {} more", which.size() - 10);
  return out;
}

}  // namespace

Tensor bucket_view(const Tensor& buffer, int64_t offset, const Tensor& param) {
  Shape strides = contiguous_strides(param.shape());
  if (!param.is_contiguous()) dense_layout_strides(param, &strides);
  return Tensor::from_storage(buffer.storage(), param.shape(), strides, buffer.offset() + offset,
                              buffer.dtype());
}

std::vector<std::vector<size_t>> assign_buckets(const Tensors& params,
                                                const std::vector<size_t>& order,
                                                const std::vector<size_t>& caps) {
  DDP_CHECK_T(ValueError, !caps.empty(), "assign_buckets: no bucket caps given");
  // One open bucket per (device, dtype); a bucket closes once it reaches its
  // cap, so a bucket may exceed the cap by its last parameter (a parameter
  // larger than the cap gets a bucket of its own).
  struct Open {
    std::vector<size_t> members;
    size_t bytes = 0;
    size_t closed = 0;  // buckets of this kind already closed
  };
  std::map<std::tuple<int, int, int>, Open> open;
  std::vector<std::vector<size_t>> buckets;
  for (size_t i : order) {
    DDP_CHECK_T(ValueError, i < params.size(), "assign_buckets: index {} out of range ({} params)",
                i, params.size());
    const Tensor& p = params[i];
    auto key = std::make_tuple(int(p.device().type), int(p.device().index), int(p.dtype()));
    Open& b = open[key];
    b.members.push_back(i);
    b.bytes += p.nbytes();
    size_t cap = caps[std::min(b.closed, caps.size() - 1)];
    if (b.bytes >= cap) {
      buckets.push_back(std::move(b.members));
      b.members.clear();
      b.bytes = 0;
      ++b.closed;
    }
  }
  for (auto& [key, b] : open)
    if (!b.members.empty()) buckets.push_back(std::move(b.members));
  // Launch order follows readiness order: sort by the first member's position.
  std::vector<size_t> position(params.size(), 0);
  for (size_t k = 0; k < order.size(); ++k) position[order[k]] = k;
  std::stable_sort(buckets.begin(), buckets.end(), [&](const auto& a, const auto& b) {
    return position[a.front()] < position[b.front()];
  });
  return buckets;
}

Reducer::Reducer(Tensors params, std::vector<std::string> names,
                 std::shared_ptr<dist::ProcessGroup> group, ReducerOptions options)
    : params_(std::move(params)), names_(std::move(names)), group_(std::move(group)),
      options_(options) {
  DDP_CHECK_T(ValueError, group_ != nullptr, "Reducer: no process group given");
  DDP_CHECK_T(ValueError, names_.size() == params_.size(),
              "Reducer: {} parameters but {} names", params_.size(), names_.size());
  DDP_CHECK_T(ValueError, options_.bucket_cap_mb > 0 && options_.first_bucket_cap_mb > 0,
              "Reducer: bucket caps must be positive, got bucket_cap_mb={} first_bucket_cap_mb={}",
              options_.bucket_cap_mb, options_.first_bucket_cap_mb);
  std::unordered_set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    DDP_CHECK_T(ValueError, p.defined(), "Reducer: parameter '{}' is undefined", names_[i]);
    DDP_CHECK_T(ValueError, p.is_leaf() && p.requires_grad() && is_floating(p.dtype()),
                "Reducer: parameter '{}' ({}) must be a floating leaf that requires grad",
                names_[i], p.describe());
    DDP_CHECK_T(ValueError, is_dense(p),
                "Reducer: parameter '{}' ({}, strides [{}]) is not dense; a bucket holds each "
                "gradient in its parameter's layout, which must fill one block (Note [Gradient "
                "buckets])",
                names_[i], p.describe(), fmt::join(p.strides(), ", "));
    DDP_CHECK_T(ValueError, seen.insert(p.impl()).second,
                "Reducer: parameter '{}' is listed twice", names_[i]);
  }
  std::vector<size_t> order(params_.size());
  std::iota(order.rbegin(), order.rend(), size_t(0));  // reverse registration order
  build_buckets(order);
  ready_.assign(params_.size(), 0);
  used_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i)
    hook_handles_.push_back(
        params_[i].register_post_accumulate_grad_hook([this, i](Tensor&) { mark_ready(i, true); }));
}

Reducer::~Reducer() {
  for (size_t i = 0; i < hook_handles_.size(); ++i)
    params_[i].remove_post_accumulate_grad_hook(hook_handles_[i]);
  // A backward that failed half-way may have left communication in flight
  // on our buffers; let it finish before they are freed.
  wait_launched_quietly();
}

void Reducer::build_buckets(const std::vector<size_t>& order) {
  // The first cap never exceeds the others: a small bucket_cap_mb asks for
  // many small buckets from the start.
  std::vector<size_t> caps = {
      mib_to_bytes(std::min(options_.first_bucket_cap_mb, options_.bucket_cap_mb)),
      mib_to_bytes(options_.bucket_cap_mb)};
  install_buckets(assign_buckets(params_, order, caps));
}

void Reducer::install_buckets(std::vector<std::vector<size_t>> assignment) {
  std::vector<std::unique_ptr<Bucket>> buckets;
  std::vector<Locator> locate(params_.size());
  NoGradGuard no_grad;
  for (auto& members : assignment) {
    auto b = std::make_unique<Bucket>();
    int64_t total = 0;
    for (size_t i : members) total += params_[i].numel();
    const Tensor& first = params_[members.front()];
    b->buffer = Tensor::zeros({total}, TensorOptions(first.dtype()).device(first.device()));
    int64_t offset = 0;
    for (size_t slot = 0; slot < members.size(); ++slot) {
      const Tensor& p = params_[members[slot]];
      Tensor view = bucket_view(b->buffer, offset, p);
      offset += p.numel();
      // A gradient that exists already moves into the bucket (a rebuild, or
      // a model that was trained before it was wrapped); Note [Gradient as
      // bucket view].
      Tensor g = p.grad();
      if (g.defined() && options_.gradient_as_bucket_view) {
        view.copy_(g);
        params_[members[slot]].set_grad(view);
      }
      b->views.push_back(view);
      locate[members[slot]] = Locator{buckets.size(), slot};
    }
    b->params = std::move(members);
    b->pending = b->params.size();
    b->timing.index = int(buckets.size());
    b->timing.bytes = b->buffer.nbytes();
    buckets.push_back(std::move(b));
  }
  buckets_ = std::move(buckets);
  locate_ = std::move(locate);
}

// ---- one backward pass -------------------------------------------------------

void Reducer::prepare_for_forward() {
  check_previous_iteration();
  backward_done_ = false;  // a new forward: its backward may run (synchronised or not)
  if (rebuild_due_) rebuild_from_rank0_order();
}

void Reducer::check_previous_iteration() {
  if (armed_) {
    // Armed but never finalised: a forward whose backward was not run (an
    // evaluation with grad mode on), or a backward that failed half-way.
    // Nothing may stay in flight on the buffers we are about to reuse.
    bool any_launched = next_launch_ > 0;
    wait_launched_or_detach();
    armed_ = false;
    callback_queued_ = false;
    if (any_launched)
      DDP_LOG_WARNING(
          "DistributedDataParallel: the previous backward did not finish; its gradients were "
          "not averaged across ranks");
  }
  if (!unfinished_error_.empty()) {
    std::string msg = std::move(unfinished_error_);
    unfinished_error_.clear();
    throw Error(msg);
  }
}

bool Reducer::wait_launched_quietly() {
  bool failed = false;
  for (auto& b : buckets_) {
    if (!b->launched) continue;
    b->launched = false;
    std::vector<dist::WorkPtr> works = {b->work.work};
    for (const Bucket::Chunk& c : b->chunks) works.push_back(c.work);  // Note [Overlap chunks]
    for (const dist::WorkPtr& w : works) {
      try {
        if (w) w->wait(group_->timeout());
      } catch (const std::exception& e) {
        failed = true;
        DDP_LOG_WARNING("DistributedDataParallel: bucket {} failed: {}", b->timing.index,
                        e.what());
      }
    }
    b->chunks.clear();
    b->chunks_issued = 0;
  }
  return failed;
}

// Note [Bucket errors]: after a failure nobody may see the old buffers.
void Reducer::wait_launched_or_detach() {
  if (!wait_launched_quietly()) return;
  discard_gradients();
  detach_failed_buffers();
}

void Reducer::prepare_for_backward(const Tensors& outputs) {
  finish_all();  // Note [Overlapped step]: the buffers are about to be reused
  check_previous_iteration();
  launched_this_backward_ = 0;
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(used_.begin(), used_.end(), 0);
  for (auto& b : buckets_) {
    b->pending = b->params.size();
    b->launched = false;
    b->work = BucketWork{};
    b->chunks.clear();
    b->chunks_issued = 0;
  }
  // Note [Overlap chunks]: decided before the first bucket goes out, from
  // what is the same on every rank (the path this backward will take).
  chunked_ = chunks_.chunk_mb > 0 && overlap_this_backward();
  chunk_queue_.clear();
  chunk_queue_head_ = 0;
  released_bytes_ = issued_bytes_ = 0;
  chunk_launches_.clear();
  next_launch_ = 0;
  callback_queued_ = false;
  armed_ = true;
  backward_done_ = false;
  unused_pending_.clear();
  saved_unused_grads_.assign(params_.size(), Tensor());
  ready_at_.assign(params_.size(), BucketTiming::Clock::time_point{});
  if (!rebuilt_ && options_.rebuild_buckets) ready_order_.clear();
  if (options_.static_graph) {
    // Note [Static graph]: never a graph walk (as in PyTorch, also with
    // find_unused_parameters); the first iteration learns at its end.
    if (static_known_) unused_pending_ = static_unused_;
  } else if (options_.find_unused_parameters) {
    find_unused(outputs);
  }
}

// Note [Unused parameters]: walk the graph from the outputs and remember
// every parameter whose accumulator it does not reach. They are marked ready
// at the first gradient hook of the backward, not here: marking one here can
// complete a bucket and start its allreduce inside forward, ahead of any
// collective the program issues between forward and backward (a logged loss,
// another model on the same group) on this rank but not on a rank where the
// parameter was used, and collectives match by order.
void Reducer::find_unused(const Tensors& outputs) {
  ++graph_walks_;
  std::unordered_set<const autograd::Node*> reached;
  std::vector<std::shared_ptr<autograd::Node>> stack;
  for (const Tensor& out : outputs) {
    if (!out.defined()) continue;
    autograd::Edge e = autograd::gradient_edge(out);
    if (e.node && reached.insert(e.node.get()).second) stack.push_back(e.node);
  }
  while (!stack.empty()) {
    std::shared_ptr<autograd::Node> n = std::move(stack.back());
    stack.pop_back();
    for (const autograd::Edge& e : n->next_edges())
      if (e.node && reached.insert(e.node.get()).second) stack.push_back(e.node);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    autograd::Edge e = autograd::gradient_edge(params_[i]);
    if (!reached.count(e.node.get())) unused_pending_.push_back(i);
  }
}

void Reducer::mark_unused_now() {
  std::vector<size_t> pending = std::move(unused_pending_);
  unused_pending_.clear();
  for (size_t i : pending)
    if (!ready_[i]) mark_ready(i, false);
}

// Called from parameter i's hook (from_hook) or for an unused parameter.
void Reducer::mark_ready(size_t i, bool from_hook) {
  if (!armed_) {
    // no_sync, or a backward DDP's forward did not prepare: local only. But
    // a second backward after one synchronised forward would leave ranks
    // with different gradients without a word, so that is an error.
    DDP_CHECK(!(from_hook && backward_done_),
              "DistributedDataParallel: parameter '{}' got a gradient in a second backward after "
              "one forward; it would not be averaged across ranks. Run the forward again for "
              "each backward (inside no_sync() to accumulate locally).",
              names_[i]);
    return;
  }
  if (from_hook && !callback_queued_) {
    // The first hook of this backward: the end-of-backward callback, and the
    // unused parameters found at forward go ready now (Note [Unused
    // parameters]).
    callback_queued_ = true;
    backward_start_ = BucketTiming::Clock::now();
    autograd::queue_callback([this] { finalize_backward(); });
    mark_unused_now();
  }
  DDP_CHECK(!ready_[i],
            "DistributedDataParallel: parameter '{}' got a gradient twice in one synchronised "
            "backward. Run one backward per forward (or use no_sync() for the extra ones).{}",
            names_[i],
            options_.static_graph
                ? " With static_graph the parameters unused in the first iteration must stay "
                  "unused (Note [Static graph])."
                : "");
  ready_[i] = 1;
  ready_at_[i] = BucketTiming::Clock::now();
  if (!rebuilt_ && options_.rebuild_buckets) ready_order_.push_back(i);
  const Locator& at = locate_[i];
  Bucket& b = *buckets_[at.bucket];
  Tensor& view = b.views[at.slot];
  Tensor g = params_[i].grad();
  {
    NoGradGuard no_grad;
    if (from_hook) used_[i] = 1;
    if (!g.defined()) {
      view.zero_();  // unused and no gradient yet: contributes zeros
    } else {
      // An unused parameter contributes the gradient it has (so that a
      // parameter used on some ranks averages like one process would); if
      // no rank used it, that local value comes back afterwards untouched.
      if (!from_hook) saved_unused_grads_[i] = g.clone();
      if (g.data_ptr() != view.data_ptr()) {  // Note [Gradient as bucket view]
        view.copy_(g);
        ++grad_copies_;
        if (options_.gradient_as_bucket_view) params_[i].set_grad(view);
      }
    }
  }
  if (--b.pending == 0) {
    b.timing.ready = BucketTiming::Clock::now();
    if (!launch_at_end_) launch_ready_buckets();
  }
}

// Note [Launch order]; the held-back tail of Note [Overlapped step] goes
// out at the end of backward (launch_held_back).
void Reducer::launch_ready_buckets() {
  const size_t until = buckets_.size() - held_back();
  while (next_launch_ < until && buckets_[next_launch_]->pending == 0) {
    if (chunked_)
      release_chunks(next_launch_++);  // Note [Overlap chunks]
    else
      launch_bucket(next_launch_++);
  }
}

void Reducer::launch_bucket(size_t index) {
  Bucket& b = *buckets_[index];
  GradBucket view;
  view.index = int(index);
  view.is_last = index + 1 == buckets_.size();
  view.buffer = b.buffer;
  for (size_t i : b.params) view.parameters.push_back(params_[i]);
  view.gradients = b.views;
  b.timing.launched = BucketTiming::Clock::now();
  if (launched_this_backward_++ == 0) ++launched_iterations_;
  // Note [Desync report]: the flight recorder names the bucket.
  dist::CollectiveTag tag(fmt::format("ddp bucket {} of {}, iteration {}", index + 1,
                                      buckets_.size(), launched_iterations_));
  b.work = hook_ ? hook_(*group_, view) : allreduce_hook(*group_, view);
  b.launched = true;
  DDP_CHECK(b.work.work != nullptr,
            "DistributedDataParallel: the communication hook returned no work for bucket {}",
            index);
}

std::vector<size_t> Reducer::unready_params() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) out.push_back(i);
  return out;
}

// Queued by the first hook of a synchronised backward; runs when the
// autograd engine has finished the graph.
void Reducer::finalize_backward() {
  struct Disarm {
    Reducer* r;
    ~Disarm() {
      r->armed_ = false;
      r->callback_queued_ = false;
      r->backward_done_ = true;
    }
  } disarm{this};

  mark_unused_now();
  // Note [Static graph]: the first iteration finds the unused parameters
  // here, at the end of backward, without walking the graph.
  const bool learn_static = options_.static_graph && !static_known_;
  if (options_.find_unused_parameters || learn_static) {
    std::vector<size_t> missing = unready_params();
    for (size_t i : missing) mark_ready(i, false);
    if (learn_static) {
      static_unused_ = missing;
      static_known_ = true;
    }
  }
  launch_ready_buckets();  // those held back by set_launch_at_end
  launch_held_back();      // Note [Overlapped step]
  if (next_launch_ < buckets_.size()) {
    // Note [Unused parameters]: without the option this is an error, raised
    // by the next forward; first let the buckets in flight finish.
    wait_launched_or_detach();
    std::vector<size_t> missing = unready_params();
    unfinished_error_ = fmt::format(
        "DistributedDataParallel (rank {}): the previous backward produced no gradient for {} "
        "parameter(s): {}. Their gradients were not averaged across ranks. Either every output "
        "of forward must take part in the loss, or construct DistributedDataParallel with "
        "find_unused_parameters = true (or static_graph = true).",
        group_->rank(), missing.size(), list_names(names_, missing));
    return;
  }
  if (chunked_ || overlap_this_backward()) {  // chunked_ implies it (prepare_for_backward)
    begin_overlap();  // Note [Overlapped step]: the buckets finish in the next forward
    return;
  }
  // Note [Bucket errors]
  // A bucket whose collective failed holds whatever the failure left in it
  // (a partial sum, a half-received buffer), and its .grad views point into
  // it: an optimizer step would consume that. So every bucket is waited (as
  // far as the timeout allows), each Work is also asked for an error that
  // wait() did not raise (nccl's wait() only orders streams, but a failure
  // its watchdog has seen is already recorded; Note [Async error handling]),
  // and on any failure every parameter's .grad is cleared (an optimizer
  // skips a parameter without a gradient, as in a single process) before
  // the first error is raised from backward. A collective that timed out may
  // still complete later and write into its buffer: so the failed buffers
  // are abandoned (kept alive, never again viewed by a .grad) and the
  // buckets get fresh ones; nothing the user can see is written after the
  // error was raised.
  std::exception_ptr failure;
  int failed_bucket = -1;
  for (auto& b : buckets_) {
    try {
      b->work.work->wait(group_->timeout());
      if (auto e = b->work.work->exception()) std::rethrow_exception(e);
      if (!failure && b->work.finish) b->work.finish();
    } catch (...) {
      if (!failure) {
        failure = std::current_exception();
        failed_bucket = b->timing.index;
      }
    }
    b->launched = false;
    b->timing.done = b->work.work->completed_at();
    b->work = BucketWork{};
  }
  if (failure) {
    discard_gradients();
    detach_failed_buffers();
    DDP_LOG_ERROR(
        "DistributedDataParallel (rank {}): the communication of bucket {} failed; the gradients "
        "of this backward were discarded (every .grad cleared)",
        group_->rank(), failed_bucket);
    std::rethrow_exception(failure);
  }
  if (grad_scale_ != 1.0) {
    NoGradGuard no_grad;
    for (auto& b : buckets_) b->buffer.mul_(grad_scale_);
  }
  timeline_.clear();
  for (const auto& b : buckets_) timeline_.push_back(b->timing);
  ++synchronised_backwards_;
  ready_times_.assign(params_.size(), std::chrono::nanoseconds(-1));
  for (size_t i = 0; i < params_.size(); ++i)
    if (used_[i])
      ready_times_[i] =
          std::chrono::duration_cast<std::chrono::nanoseconds>(ready_at_[i] - backward_start_);
  std::vector<char> globally_used(params_.size(), 1);
  if (options_.find_unused_parameters || options_.static_graph) globally_used = reduce_used_flags();
  copy_back_to_grads(globally_used);
  // Note [Rebuilding buckets]: under find_unused_parameters the order in
  // which gradients arrive differs between ranks and iterations, so the
  // rebuild is skipped (as PyTorch does) unless the graph is static.
  if (!rebuilt_ && options_.rebuild_buckets &&
      (!options_.find_unused_parameters || options_.static_graph))
    rebuild_due_ = true;
}

// Note [Gradient as bucket view]: after the buckets were averaged, each
// .grad must hold its parameter's average. As a view it already does; as a
// separate tensor it gets one copy. A parameter no rank used keeps the .grad
// it had (restored if the bucket averaged it) or none.
void Reducer::copy_back_to_grads(const std::vector<char>& globally_used) {
  for (size_t i = 0; i < params_.size(); ++i) copy_back_param(i, globally_used[i]);
  saved_unused_grads_.assign(params_.size(), Tensor());
}

void Reducer::copy_back_param(size_t i, bool globally_used) {
  NoGradGuard no_grad;
  const Locator& at = locate_[i];
  const Tensor& view = buckets_[at.bucket]->views[at.slot];
  Tensor g = params_[i].grad();
  if (!globally_used) {
    if (g.defined() && saved_unused_grads_[i].defined() && g.data_ptr() == view.data_ptr())
      g.copy_(saved_unused_grads_[i]);
    return;
  }
  if (options_.gradient_as_bucket_view) {
    if (!g.defined()) params_[i].set_grad(view);
  } else if (g.defined()) {
    g.copy_(view);
    ++grad_copies_;
  } else {
    params_[i].set_grad(view.clone());
    ++grad_copies_;
  }
}

// See Note [Bucket errors].
void Reducer::discard_gradients() {
  NoGradGuard no_grad;
  for (Tensor& p : params_) p.set_grad(Tensor());
}

// See Note [Bucket errors]: the old buffers stay alive (a late completion
// writes into memory nobody reads) and every bucket gets a fresh one.
void Reducer::detach_failed_buffers() {
  for (auto& b : buckets_) abandoned_.push_back(b->buffer);
  install_buckets(bucket_assignment());
}

// Tensors of host data for a control collective. See Note [Routing by device].
Tensor Reducer::control_tensor(const Tensor& host) const {
  const Device compute = params_.empty() ? Device::cpu() : params_.front().device();
  return host.to(dist::control_device(*group_, compute));
}

// Note [Unused parameters]: which parameters some rank used. With a static
// graph the answer of the first iteration holds for all (Note [Static graph]).
std::vector<char> Reducer::reduce_used_flags() {
  if (options_.static_graph && !static_global_used_.empty())
    return static_global_used_;
  std::vector<float> flags(used_.begin(), used_.end());
  Tensor t = control_tensor(Tensor::from_vector(flags, {int64_t(flags.size())}));
  group_->allreduce({t}, dist::ReduceOp::sum)->wait(group_->timeout());
  std::vector<float> global = t.cpu().to_vector<float>();
  std::vector<char> out(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) out[i] = global[i] != 0;
  if (options_.static_graph) static_global_used_ = out;
  return out;
}

}  // namespace ddp::parallel
