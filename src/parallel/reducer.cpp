// The Reducer: gradient buckets, readiness hooks, launch in order, and the
// wait at the end of backward. See the Notes in reducer.h.

#include "ddp/parallel/reducer.h"

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

struct Reducer::Bucket {
  Tensor buffer;                // flat: the gradients of `params`, back to back
  std::vector<size_t> params;   // parameter indices, in bucket order
  Tensors views;                // by slot: the .grad of params[slot]
  size_t pending = 0;           // gradients not yet ready in this pass
  bool launched = false;
  BucketWork work;
  BucketTiming timing;
};

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
  std::vector<std::unique_ptr<Bucket>> buckets;
  std::vector<Locator> locate(params_.size());
  NoGradGuard no_grad;
  for (auto& members : assign_buckets(params_, order, caps)) {
    auto b = std::make_unique<Bucket>();
    int64_t total = 0;
    for (size_t i : members) total += params_[i].numel();
    const Tensor& first = params_[members.front()];
    b->buffer = Tensor::zeros({total}, TensorOptions(first.dtype()).device(first.device()));
    int64_t offset = 0;
    for (size_t slot = 0; slot < members.size(); ++slot) {
      const Tensor& p = params_[members[slot]];
      Tensor view = b->buffer.narrow(0, offset, p.numel()).view(p.shape());
      offset += p.numel();
      // A gradient that exists already moves into the bucket (a rebuild, or
      // a model that was trained before it was wrapped).
      Tensor g = p.grad();
      if (g.defined()) {
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

std::vector<std::vector<size_t>> Reducer::bucket_assignment() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : buckets_) out.push_back(b->params);
  return out;
}

void Reducer::register_comm_hook(CommHook hook) {
  DDP_CHECK_T(ValueError, hook != nullptr, "register_comm_hook: empty hook");
  DDP_CHECK_T(ValueError, hook_ == nullptr,
              "register_comm_hook: a communication hook is registered already (one per model)");
  hook_ = std::move(hook);
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
    wait_launched_quietly();
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

void Reducer::wait_launched_quietly() {
  for (auto& b : buckets_) {
    if (!b->launched) continue;
    b->launched = false;
    try {
      if (b->work.work) b->work.work->wait(group_->timeout());
    } catch (const std::exception& e) {
      DDP_LOG_WARNING("DistributedDataParallel: bucket {} failed: {}", b->timing.index, e.what());
    }
  }
}

void Reducer::prepare_for_backward(const Tensors& outputs) {
  check_previous_iteration();
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(used_.begin(), used_.end(), 0);
  for (auto& b : buckets_) {
    b->pending = b->params.size();
    b->launched = false;
    b->work = BucketWork{};
  }
  next_launch_ = 0;
  callback_queued_ = false;
  armed_ = true;
  backward_done_ = false;
  if (!rebuilt_ && options_.rebuild_buckets) ready_order_.clear();
  if (!options_.find_unused_parameters) return;

  // Note [Unused parameters]: walk the graph from the outputs and mark every
  // parameter whose accumulator it does not reach.
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
    if (!reached.count(e.node.get())) mark_ready(i, false);
  }
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
  DDP_CHECK(!ready_[i],
            "DistributedDataParallel: parameter '{}' got a gradient twice in one synchronised "
            "backward. Run one backward per forward (or use no_sync() for the extra ones).",
            names_[i]);
  ready_[i] = 1;
  if (!rebuilt_ && options_.rebuild_buckets) ready_order_.push_back(i);
  const Locator& at = locate_[i];
  Bucket& b = *buckets_[at.bucket];
  Tensor& view = b.views[at.slot];
  Tensor g = params_[i].grad();
  {
    NoGradGuard no_grad;
    if (!g.defined()) {
      view.zero_();  // unused and no gradient yet: contributes zeros
    } else {
      used_[i] = 1;
      if (g.data_ptr() != view.data_ptr()) {  // a fresh gradient: move it in
        view.copy_(g);
        params_[i].set_grad(view);
      }
    }
  }
  if (from_hook && !callback_queued_) {
    callback_queued_ = true;
    autograd::queue_callback([this] { finalize_backward(); });
  }
  if (--b.pending == 0) {
    b.timing.ready = BucketTiming::Clock::now();
    launch_ready_buckets();
  }
}

// Note [Launch order]
void Reducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) {
    Bucket& b = *buckets_[next_launch_];
    GradBucket view;
    view.index = int(next_launch_);
    view.is_last = next_launch_ + 1 == buckets_.size();
    view.buffer = b.buffer;
    for (size_t i : b.params) view.parameters.push_back(params_[i]);
    view.gradients = b.views;
    b.timing.launched = BucketTiming::Clock::now();
    if (next_launch_ == 0) ++launched_iterations_;  // buckets launch in order from 0
    // Note [Desync report]: the flight recorder names the bucket.
    dist::CollectiveTag tag(fmt::format("ddp bucket {} of {}, iteration {}", next_launch_ + 1,
                                        buckets_.size(), launched_iterations_));
    b.work = hook_ ? hook_(*group_, view) : allreduce_hook(*group_, view);
    b.launched = true;
    DDP_CHECK(b.work.work != nullptr,
              "DistributedDataParallel: the communication hook returned no work for bucket {}",
              next_launch_);
    ++next_launch_;
  }
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

  if (options_.find_unused_parameters)
    for (size_t i : unready_params()) mark_ready(i, false);
  if (next_launch_ < buckets_.size()) {
    // Note [Unused parameters]: without the option this is an error, raised
    // by the next forward; first let the buckets in flight finish.
    wait_launched_quietly();
    std::vector<size_t> missing = unready_params();
    unfinished_error_ = fmt::format(
        "DistributedDataParallel (rank {}): the previous backward produced no gradient for {} "
        "parameter(s): {}. Their gradients were not averaged across ranks. Either every output "
        "of forward must take part in the loss, or construct DistributedDataParallel with "
        "find_unused_parameters = true.",
        group_->rank(), missing.size(), list_names(names_, missing));
    return;
  }
  // Note [Bucket errors]
  // A bucket whose collective failed holds whatever the failure left in it
  // (a partial sum, a half-received buffer), and its .grad views point into
  // it: an optimizer step would consume that. So every bucket is waited (none
  // may stay in flight on our buffers), each Work is also asked for an error
  // that wait() did not raise (nccl's wait() only orders streams, but a
  // failure its watchdog has seen is already recorded; Note [Async error
  // handling]), and on any failure every parameter's .grad is cleared (an
  // optimizer skips a parameter without a gradient, as in a single process)
  // before the first error is raised from backward. The next backward fills
  // the buckets afresh.
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
    DDP_LOG_ERROR(
        "DistributedDataParallel (rank {}): the communication of bucket {} failed; the gradients "
        "of this backward were discarded (every .grad cleared)",
        group_->rank(), failed_bucket);
    std::rethrow_exception(failure);
  }
  timeline_.clear();
  for (const auto& b : buckets_) timeline_.push_back(b->timing);
  if (options_.find_unused_parameters) reduce_used_flags();
  if (!rebuilt_ && options_.rebuild_buckets) rebuild_due_ = true;
}

// See Note [Bucket errors].
void Reducer::discard_gradients() {
  NoGradGuard no_grad;
  for (Tensor& p : params_) p.set_grad(Tensor());
}

// Tensors of host data for a control collective. See Note [Routing by device].
Tensor Reducer::control_tensor(const Tensor& host) const {
  const Device compute = params_.empty() ? Device::cpu() : params_.front().device();
  return host.to(dist::control_device(*group_, compute));
}

// Note [Unused parameters]: a parameter no rank used keeps an undefined
// .grad; one that some rank used gets the averaged bucket view.
void Reducer::reduce_used_flags() {
  std::vector<float> flags(used_.begin(), used_.end());
  Tensor t = control_tensor(Tensor::from_vector(flags, {int64_t(flags.size())}));
  group_->allreduce({t}, dist::ReduceOp::sum)->wait(group_->timeout());
  std::vector<float> global = t.cpu().to_vector<float>();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (global[i] == 0 || params_[i].grad().defined()) continue;
    const Locator& at = locate_[i];
    params_[i].set_grad(buckets_[at.bucket]->views[at.slot]);
  }
}

// Note [Rebuilding buckets]
void Reducer::rebuild_from_rank0_order() {
  rebuild_due_ = false;
  std::vector<int64_t> order;
  std::vector<char> listed(params_.size(), 0);
  for (size_t i : ready_order_) {
    order.push_back(int64_t(i));
    listed[i] = 1;
  }
  for (size_t i = params_.size(); i-- > 0;)  // never ready: reverse registration order
    if (!listed[i]) order.push_back(int64_t(i));
  Tensor t = control_tensor(Tensor::from_vector(order, {int64_t(order.size())}));
  group_->broadcast({t}, 0)->wait(group_->timeout());
  std::vector<int64_t> rank0 = t.cpu().to_vector<int64_t>();
  std::vector<size_t> new_order;
  std::vector<char> seen(params_.size(), 0);
  for (int64_t v : rank0) {
    DDP_CHECK(v >= 0 && size_t(v) < params_.size() && !seen[size_t(v)],
              "DistributedDataParallel: rank 0's gradient order is not a permutation of {} "
              "parameters (do all ranks wrap the same model?)",
              params_.size());
    seen[size_t(v)] = 1;
    new_order.push_back(size_t(v));
  }
  build_buckets(new_order);
  rebuilt_ = true;
  ready_order_.clear();
}

}  // namespace ddp::parallel
