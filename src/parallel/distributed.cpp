// DistributedDataParallel: construction checks, parameter broadcast, and the
// work around each forward. The gradient averaging itself is the Reducer's.

#include "ddp/parallel/distributed.h"

#include <algorithm>
#include <cstring>

#include "ddp/core/error.h"

namespace ddp::parallel {

namespace {

// One line per parameter: what must be equal on every rank, the memory
// layout included (buckets and broadcasts move bytes as they lie: Note
// [Dense tensors in collectives]).
std::vector<std::string> describe_parameters(const nn::TensorDict& params) {
  std::vector<std::string> lines;
  for (const auto& [name, p] : params) {
    std::string line = fmt::format("'{}' {} {}", name, shape_str(p.shape()), dtype_name(p.dtype()));
    if (!p.is_contiguous()) line += fmt::format(" strides [{}]", fmt::join(p.strides(), ", "));
    lines.push_back(std::move(line));
  }
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::vector<std::string> split_lines(const std::string& blob) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < blob.size()) {
    size_t end = blob.find('\n', start);
    if (end == std::string::npos) end = blob.size();
    lines.push_back(blob.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace

DistributedDataParallelBase::DistributedDataParallelBase(std::shared_ptr<nn::Module> module,
                                                         std::shared_ptr<dist::ProcessGroup> group,
                                                         DDPOptions options)
    : module_base_(std::move(module)), group_(std::move(group)), options_(options) {
  DDP_CHECK(module_base_ != nullptr, "DistributedDataParallel: no module given");
  DDP_CHECK(group_ != nullptr, "DistributedDataParallel: no process group given");
  DDP_CHECK(options_.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be > 0, got {}",
            options_.bucket_cap_mb);
  buffers_ = module_base_->buffers();
  if (!options_.fault_tolerant) {
    verify_same_model_on_all_ranks();
    Tensors state = module_base_->parameters();  // frozen ones too: all ranks start equal
    state.insert(state.end(), buffers_.begin(), buffers_.end());
    broadcast_from(state, 0);
  }
  if (options_.auto_bucket_size)
    tuner_ = std::make_unique<BucketAutoTuner>(tuner_params(), options_.auto_bucket_iterations);
  reducer_ = make_reducer(group_);
}

Tensors DistributedDataParallelBase::tuner_params() const {
  Tensors params;
  for (const auto& [name, p] : module_base_->named_parameters())
    if (p.requires_grad()) params.push_back(p);
  return params;
}

std::unique_ptr<Reducer> DistributedDataParallelBase::make_reducer(
    std::shared_ptr<dist::ProcessGroup> group) const {
  Tensors params;
  std::vector<std::string> names;
  for (const auto& [name, p] : module_base_->named_parameters())
    if (p.requires_grad()) {
      params.push_back(p);
      names.push_back(name);
    }
  ReducerOptions r;
  r.bucket_cap_mb = options_.bucket_cap_mb;
  r.find_unused_parameters = options_.find_unused_parameters;
  r.rebuild_buckets = options_.rebuild_buckets;
  r.static_graph = options_.static_graph;
  r.gradient_as_bucket_view = options_.gradient_as_bucket_view;
  return std::make_unique<Reducer>(std::move(params), std::move(names), std::move(group), r);
}

void DistributedDataParallelBase::reset_group(std::shared_ptr<dist::ProcessGroup> group,
                                              bool keep_comm_hook) {
  DDP_CHECK(group != nullptr, "DistributedDataParallel::reset_group: no process group given");
  refuse_with_overlap("reset_group");
  DDP_CHECK(join_ == nullptr,
            "DistributedDataParallel::reset_group: not inside a Join scope (its collectives "
            "count the old group's ranks)");
  // Drop whatever a failed backward left: the gradients may be views of the
  // old reducer's (possibly abandoned) buffers.
  for (const Tensor& p : module_base_->parameters()) Tensor(p).set_grad(Tensor());
  std::unique_ptr<Reducer> next = make_reducer(group);
  std::swap(reducer_, next);
  next.reset();  // removes the old reducer's hooks
  group_ = std::move(group);
  if (tuner_) tuner_ = std::make_unique<BucketAutoTuner>(tuner_params(), options_.auto_bucket_iterations);
  if (comm_hook_ && keep_comm_hook) reducer_->register_comm_hook(comm_hook_);
  if (!keep_comm_hook) comm_hook_ = nullptr;
}

DistributedDataParallelBase::~DistributedDataParallelBase() { overlap_detach(); }

// Every rank sends its parameter list (names, shapes, dtypes) to every rank,
// and every rank compares them with rank 0's, so all ranks raise the same
// error naming the first difference and the ranks that have it.
void DistributedDataParallelBase::verify_same_model_on_all_ranks() {
  const int n = group_->size();
  if (n == 1) return;
  std::vector<std::string> mine = describe_parameters(module_base_->named_parameters());
  std::string blob = join_lines(mine);

  // Host data, on whatever device the group takes it (a bare nccl group: the
  // model's GPU), read back through cpu().
  const Device on = control_device(*group_, model_device());
  Tensor my_len = Tensor::from_vector(std::vector<int64_t>{int64_t(blob.size())}, {1}).to(on);
  Tensors lens;
  for (int r = 0; r < n; ++r)
    lens.push_back(Tensor::empty({1}, TensorOptions(DType::i64).device(on)));
  group_->allgather(lens, my_len)->wait(group_->timeout());
  for (Tensor& l : lens) l = l.cpu();
  int64_t longest = 0;
  for (const Tensor& l : lens) longest = std::max(longest, l.item<int64_t>());

  Tensor padded = Tensor::zeros({longest}, DType::u8);
  if (!blob.empty()) std::memcpy(padded.data<uint8_t>(), blob.data(), blob.size());
  padded = padded.to(on);
  Tensors blobs;
  for (int r = 0; r < n; ++r)
    blobs.push_back(Tensor::empty({longest}, TensorOptions(DType::u8).device(on)));
  group_->allgather(blobs, padded)->wait(group_->timeout());
  for (Tensor& b : blobs) b = b.cpu();

  std::vector<std::vector<std::string>> all;
  for (int r = 0; r < n; ++r) {
    const char* p = reinterpret_cast<const char*>(blobs[size_t(r)].data<uint8_t>());
    all.push_back(split_lines(std::string(p, size_t(lens[size_t(r)].item<int64_t>()))));
  }
  size_t most = 0;
  for (const auto& lines : all) most = std::max(most, lines.size());
  for (size_t k = 0; k < most; ++k) {
    auto at = [&](int r) { return k < all[size_t(r)].size() ? all[size_t(r)][k] : "(none)"; };
    std::vector<int> differ;
    for (int r = 1; r < n; ++r)
      if (at(r) != at(0)) differ.push_back(r);
    if (differ.empty()) continue;
    std::string theirs;
    for (int r : differ) theirs += fmt::format("; rank {} has {}", r, at(r));
    throw ValueError(fmt::format(
        "DistributedDataParallel: the ranks wrap different models. Parameter {} (of {} on "
        "rank 0): rank 0 has {}{}. Every rank must build the same model.",
        k, all[0].size(), at(0), theirs));
  }
}

Device DistributedDataParallelBase::model_device() const {
  for (const Tensor& p : module_base_->parameters()) return p.device();
  return Device::cpu();
}

void DistributedDataParallelBase::broadcast_from(const Tensors& tensors, int root) {
  if (group_->size() == 1 || tensors.empty()) return;
  NoGradGuard no_grad;
  group_->broadcast(tensors, root)->wait(group_->timeout());
}

void DistributedDataParallelBase::pre_forward() {
  for (const auto& hook : forward_pre_hooks_) hook();
  // Note [Overlapped step]: a bucket rebuild moves parameters between
  // buckets, so what is pending is applied first (once, at the second forward).
  if (overlap_ && reducer_->rebuild_due()) synchronize_step();
  // Note [Overlapped step model]: until the tuner has chosen, every forward
  // starts with nothing in flight (its measurement and its rebuild need the
  // buckets finished), on every rank alike.
  if (overlap_ && tuner_ && !tuner_->done()) synchronize_step();
  if (!autograd::grad_enabled()) return;
  int buffer_root = 0;
  if (join_) {
    // Note [Join]: one allreduce says who is still here; then this
    // iteration's SyncBatchNorm collectives are noted for a rank that joins.
    Join::Notice notice = join_->notify(*this, sync_, reducer_->rebuild_due());
    buffer_root = notice.root;
    reducer_->set_grad_scale(notice.grad_scale);
    join_close_iteration();
    reducer_->set_launch_at_end(!join_log_last_.empty());
    join_log_open_ = true;
    detail::set_join_log(&join_log_building_);
  }
  reducer_->prepare_for_forward();
  if (tuner_) tuner_->on_forward(*reducer_, *group_);
  // Inside no_sync the buffers stay local (the gradients do too); all go out
  // in one coalesced broadcast.
  if (options_.broadcast_buffers && sync_ && module_base_->is_training())
    broadcast_from(buffers_, buffer_root);
}

void DistributedDataParallelBase::post_forward(const Tensors& outputs) {
  for (const auto& hook : forward_post_hooks_) hook();
  // Note [Overlapped step]: parameters this forward did not use are stepped
  // now, before the next backward reuses the buckets.
  if (overlap_) overlap_apply_all();
  if (autograd::grad_enabled() && sync_) reducer_->prepare_for_backward(outputs);
}

// ---- Note [Join] -----------------------------------------------------------------

void DistributedDataParallelBase::set_join_context(Join* join) {
  join_ = join;
  // Note [Overlapped step]: a Join scope keeps the plain launch order.
  if (overlap_) overlap_follow_join(join != nullptr);
  if (join == nullptr) {
    reducer_->set_grad_scale(1.0);
    reducer_->set_launch_at_end(false);
    join_log_open_ = false;
    join_log_building_.clear();
  }
}

std::string DistributedDataParallelBase::join_refusal() const {
  // A joined rank shadows only the collectives Note [Join] lists; these
  // issue others (timed allreduces and a plan broadcast; reduce-scatters
  // and all-gathers), which it would leave unanswered.
  const BucketAutoTuner* tuner = bucket_tuner();
  if (tuner != nullptr && !tuner->done())
    return "is still choosing its buckets (auto_bucket_size); a rank that joins early cannot "
           "shadow that. Enter the join after auto_bucket_iterations + 2 iterations, or set "
           "bucket_cap_mb instead";
  if (has_forward_pre_hooks())
    return "has a forward pre-hook (a ZeroRedundancyOptimizer); Join does not shadow ZeRO-1's "
           "reduce-scatters and all-gathers";
  return {};
}

void DistributedDataParallelBase::join_close_iteration() {
  if (!join_log_open_) return;
  join_log_last_ = std::move(join_log_building_);
  join_log_building_.clear();
  join_log_open_ = false;
}

void DistributedDataParallelBase::join_shadow_iteration(bool syncing, bool rebuild,
                                                        int buffer_root) {
  // Note [Overlapped step]: this rank's last step, recorded before it ran
  // out of inputs, is applied before anything else touches the parameters.
  synchronize_step();
  NoGradGuard no_grad;
  if (rebuild) reducer_->shadow_rebuild();
  if (options_.broadcast_buffers && syncing && module_base_->is_training())
    broadcast_from(buffers_, buffer_root);
  for (const JoinCollective& c : join_log_last_) {
    Tensor zeros = Tensor::zeros(c.shape, TensorOptions(c.dtype).device(c.device));
    c.group->allreduce({zeros})->wait(c.group->timeout());
  }
  if (syncing) reducer_->shadow_backward();
}

void DistributedDataParallelBase::join_final_sync(int root) {
  synchronize_step();  // before root's parameters arrive, not after
  Tensors state = module_base_->parameters();
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  broadcast_from(state, root);
}

}  // namespace ddp::parallel
