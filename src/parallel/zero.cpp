// ZeroRedundancyOptimizer: the shard layout, the reduce-scatter hook, the
// shard step and the parameter all-gather. See Note [ZeRO-1 shards] in
// ddp/parallel/zero.h; the checkpoints are in zero_state.cpp.

#include "ddp/parallel/zero.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/dist/flight_recorder.h"
#include "ddp/optim/multi_tensor.h"
#include "ddp/tensor/dense_layout.h"
#include "parallel/zero_shared.h"

namespace ddp::parallel {

LocalOptimizerFactory zero_sgd(double lr, optim::SGDOptions options) {
  return [lr, options](std::vector<optim::ParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(std::move(groups), lr, options);
  };
}

LocalOptimizerFactory zero_adamw(double lr, optim::AdamWOptions options) {
  return [lr, options](std::vector<optim::ParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(std::move(groups), lr, options);
  };
}

size_t optimizer_state_bytes(const optim::Optimizer& opt) {
  size_t count = 0, bytes = 0;
  for (const auto& g : opt.param_groups()) count += g.params.size();
  for (size_t i = 0; i < count; ++i)
    for (const auto& [name, t] : opt.state(i)) bytes += t.nbytes();
  return bytes;
}

// ---- the layout ----------------------------------------------------------

ZeroShared::ZeroShared(DistributedDataParallelBase& ddp, Tensors model_params)
    : ddp(&ddp), params(std::move(model_params)) {
  const char* who = "ZeroRedundancyOptimizer";
  DDP_CHECK_T(ValueError, !ddp.options().rebuild_buckets,
              "{}: the wrapped DistributedDataParallel must use rebuild_buckets = false (the "
              "shards follow the buckets, which a rebuild would move; Note [ZeRO-1 shards])",
              who);
  DDP_CHECK_T(ValueError, !ddp.options().find_unused_parameters,
              "{}: find_unused_parameters is not supported (a shard cannot leave one "
              "parameter's gradient undefined)",
              who);
  lay_out();
}

void ZeroShared::lay_out() {
  const char* who = "ZeroRedundancyOptimizer";
  group = &ddp->group();
  rank = group->rank();
  world = group->size();
  buckets.clear();
  segments.clear();
  segment_params.clear();
  gather_order.clear();
  bucket_of.assign(params.size(), 0);
  const auto assignment = ddp->reducer().bucket_assignment();
  NoGradGuard no_grad;
  for (size_t b = 0; b < assignment.size(); ++b) {
    BucketShard s;
    int64_t offset = 0;
    for (size_t i : assignment[b]) {
      DDP_CHECK_T(ValueError, i < params.size(),
                  "{}: the reducer names parameter {} but the model has {} trainable ones", who,
                  i, params.size());
      // Shards cut each parameter's block in memory order, whatever its
      // dense layout (Note [ZeRO-1 shards]).
      DDP_CHECK_T(ValueError, is_dense(params[i]),
                  "{}: parameter {} ({}, strides [{}]) is not dense", who, i,
                  params[i].describe(), fmt::join(params[i].strides(), ", "));
      s.params.push_back(i);
      s.offsets.push_back(offset);
      bucket_of[i] = b;
      offset += params[i].numel();
    }
    s.numel = offset;
    s.chunk = (offset + world - 1) / world;
    const Tensor& first = params[assignment[b].front()];
    const TensorOptions like = TensorOptions(first.dtype()).device(first.device());
    // One rank averages nothing: its chunk is the bucket buffer itself
    // (Note [ZeRO-1 copies]).
    if (world > 1) s.grad_chunk = Tensor::zeros({s.chunk}, like);
    if (s.chunk * world != s.numel) s.scratch = Tensor::zeros({s.chunk * world}, like);
    const int64_t lo = rank * s.chunk, hi = std::min(lo + s.chunk, s.numel);
    for (size_t k = 0; k < s.params.size(); ++k) {
      const int64_t p_lo = s.offsets[k], p_hi = p_lo + params[s.params[k]].numel();
      const int64_t a = std::max(lo, p_lo), e = std::min(hi, p_hi);
      if (a >= e) continue;
      ZeroSegment seg{s.params[k], a - p_lo, e - a, b, a - lo};
      Tensor view = flat_view(params[seg.param], who).narrow(0, seg.offset, seg.length);
      view.set_requires_grad(true);
      segments.push_back(seg);
      segment_params.push_back(view);
    }
    buckets.push_back(std::move(s));
  }
  DDP_CHECK_T(ValueError, !segments.empty(),
              "{}: rank {} of {} owns no element of the model's {} gradient buckets (the model "
              "is smaller than the world size); use plain DDP",
              who, rank, world, buckets.size());
}

// Note [ZeRO-1 shards]: the bucket's averaged chunk goes to its owner.
BucketWork ZeroShared::reduce_scatter_hook(dist::ProcessGroup& g, GradBucket& bucket) {
  // Note [ZeRO-1 in an elastic job]: the shards were cut for another group.
  DDP_CHECK_T(ValueError, &g == group,
              "ZeroRedundancyOptimizer: the DistributedDataParallel's process group changed "
              "(reset_group) but the shards were cut for the old one ({} ranks); in an elastic "
              "job add the optimizer to the ElasticGroup's state with "
              "parallel::add_checkpoint_section, which re-cuts them",
              world);
  DDP_CHECK_T(ValueError, bucket.index >= 0 && size_t(bucket.index) < buckets.size(),
              "ZeroRedundancyOptimizer: bucket {} is not one of the {} buckets it was built for",
              bucket.index, buckets.size());
  BucketShard& s = buckets[size_t(bucket.index)];
  DDP_CHECK_T(ValueError, bucket.buffer.numel() == s.numel,
              "ZeroRedundancyOptimizer: bucket {} holds {} elements, but the shards were laid out "
              "for {}; were the buckets rebuilt?",
              bucket.index, bucket.buffer.numel(), s.numel);
  // Note [ZeRO-1 overlapped with the forward]: the DDP forward finished
  // every all-gather; only a backward whose forward bypassed DDP gets here.
  DDP_CHECK_T(ValueError, !s.gather_pending,
              "ZeroRedundancyOptimizer: bucket {} is reduce-scattered while the last step's "
              "all-gather into it is still pending; run the forward through the "
              "DistributedDataParallel (or call synchronize_parameters() first)",
              bucket.index);
  s.buffer = bucket.buffer;
  Tensor comm = s.buffer;
  if (s.scratch.defined()) {
    NoGradGuard no_grad;
    s.scratch.narrow(0, 0, s.numel).copy_(s.buffer);
    // The padding is zero: nothing else writes past numel except the
    // all-gather, whose padding comes from the zero tail of a send buffer.
    comm = s.scratch;
  }
  dist::WorkPtr work;
  if (world == 1) {
    // Note [ZeRO-1 copies]: the average over one rank is the gradient as it is.
    s.grad_chunk = s.buffer;
    work = std::make_shared<dist::Work>("reduce_scatter");
    work->mark_completed();
  } else {
    Tensors inputs;
    for (int r = 0; r < world; ++r) inputs.push_back(comm.narrow(0, r * s.chunk, s.chunk));
    work = g.reduce_scatter(s.grad_chunk, inputs, dist::ReduceOp::avg);
  }
  const size_t b = size_t(bucket.index);
  return BucketWork{std::move(work), [this, b]() {
                      const BucketShard& done = buckets[b];
                      for (size_t k = 0; k < segments.size(); ++k) {
                        const ZeroSegment& seg = segments[k];
                        if (seg.bucket != b) continue;
                        segment_params[k].set_grad(
                            done.grad_chunk.narrow(0, seg.chunk_offset, seg.length));
                      }
                      buckets[b].zero_due = true;
                    }};
}

// Note [ZeRO-1 copies]: this rank's updated chunk is packed into its own
// slot of the gather target, which the all-gather then fills in place.
void ZeroShared::launch_gather(size_t b) {
  NoGradGuard no_grad;
  BucketShard& s = buckets[b];
  for (size_t k = 0; k < segments.size(); ++k) {
    const ZeroSegment& seg = segments[k];
    if (seg.bucket != b) continue;
    s.gather_target()
        .narrow(0, rank * s.chunk + seg.chunk_offset, seg.length)
        .copy_(segment_params[k]);
  }
  const Tensor target = s.gather_target();
  Tensors outputs;
  for (int r = 0; r < world; ++r) outputs.push_back(target.narrow(0, r * s.chunk, s.chunk));
  // Note [Desync report]: the flight recorder names the bucket.
  dist::CollectiveTag tag(fmt::format("zero all-gather bucket {} of {}", b + 1, buckets.size()));
  s.gather = group->allgather(outputs, outputs[size_t(rank)]);
  s.gather_pending = true;
  gather_order.push_back(b);
}

namespace {
void check_backward_ran(const std::vector<ZeroShared::BucketShard>& buckets) {
  for (const ZeroShared::BucketShard& s : buckets)
    DDP_CHECK_T(ValueError, s.buffer.defined() || s.scratch.defined(),
                "ZeroRedundancyOptimizer.step: no backward has run through DDP yet");
}
}  // namespace

void ZeroShared::launch_all_gather() {
  check_backward_ran(buckets);
  // One rank: the step updated the parameters themselves; nothing to gather.
  if (world == 1) return;
  // A second step before any forward: the first one's gathers land first.
  for (size_t b = 0; b < buckets.size(); ++b) complete_gather(b);
  gather_order.clear();
  for (size_t b = 0; b < buckets.size(); ++b) launch_gather(b);
}

// Note [ZeRO-1 overlapped with the forward]
void ZeroShared::step_and_launch(optim::Optimizer& local) {
  check_backward_ran(buckets);
  if (world == 1) {
    local.step();
    return;
  }
  for (size_t b = 0; b < buckets.size(); ++b) complete_gather(b);
  gather_order.clear();
  const std::vector<optim::Optimizer::GroupHyper> hyper = local.group_hyperparameters();
  for (size_t b = buckets.size(); b-- > 0;) {
    std::vector<size_t> numbers;  // the local optimizer numbers the segments
    for (size_t k = 0; k < segments.size(); ++k)
      if (segments[k].bucket == b) numbers.push_back(k);
    local.step_parameters(numbers, hyper);
    launch_gather(b);  // every rank, even one that owns nothing of b
  }
}

bool ZeroShared::any_gather_pending() const {
  for (const BucketShard& s : buckets)
    if (s.gather_pending) return true;
  return false;
}

void ZeroShared::complete_gather(size_t b) {
  BucketShard& s = buckets[b];
  if (!s.gather_pending) return;
  NoGradGuard no_grad;
  s.gather_pending = false;
  dist::WorkPtr work = std::move(s.gather);
  work->wait(group->timeout());
  const Tensor from = s.gather_target();
  // This rank's own chunk is in the parameters already (the step wrote
  // them through the segment views): copy the other ranks' pieces only.
  const int64_t own_lo = rank * s.chunk, own_hi = own_lo + s.chunk;
  for (size_t k = 0; k < s.params.size(); ++k) {
    Tensor p = flat_view(params[s.params[k]], "ZeroRedundancyOptimizer");
    const int64_t p_lo = s.offsets[k], p_hi = p_lo + p.numel();
    auto copy_range = [&](int64_t a, int64_t e) {
      if (a < e) p.narrow(0, a - p_lo, e - a).copy_(from.narrow(0, a, e - a));
    };
    copy_range(p_lo, std::min(p_hi, own_lo));
    copy_range(std::max(p_lo, own_hi), p_hi);
  }
}

void ZeroShared::finish_bucket(size_t b) {
  complete_gather(b);
  // The model's .grad are the bucket buffers: start the next accumulation
  // from zero, as a zero_grad() of plain DDP would.
  BucketShard& s = buckets[b];
  if (s.zero_due) {
    s.zero_due = false;
    NoGradGuard no_grad;
    if (s.buffer.defined()) s.buffer.zero_();
  }
}

void ZeroShared::finish_all_gather() {
  for (size_t b = 0; b < buckets.size(); ++b) finish_bucket(b);
}

// ---- the optimizer -------------------------------------------------------

Tensors ZeroRedundancyOptimizer::trainable_parameters(nn::Module& module) {
  Tensors out;
  for (const auto& [name, p] : module.named_parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(DistributedDataParallelBase& ddp,
                                                 nn::Module& module, Tensors params,
                                                 LocalOptimizerFactory make_local,
                                                 ZeroOptions options)
    : ZeroRedundancyOptimizer(std::make_shared<ZeroShared>(ddp, std::move(params)),
                              std::move(make_local)) {
  options_ = options;
  const char* who = "ZeroRedundancyOptimizer";
  if (options.overlap_with_forward) {
    // Note [ZeRO-1 overlapped with the forward]
    DDP_CHECK_T(ValueError, !ddp.options().fault_tolerant,
                "{}: overlap_with_forward is not offered with fault_tolerant (a failed "
                "all-gather would surface inside a layer of the next forward, some layers "
                "updated and others not); use overlap_with_forward = false",
                who);
    DDP_CHECK_T(ValueError, !ddp.overlaps_step(),
                "{}: the DistributedDataParallel overlaps its step (overlap_step), which takes "
                "a plain optimizer; for ZeRO-1 use ZeroOptions::overlap_with_forward instead",
                who);
  }
  std::shared_ptr<ZeroShared> shared = shared_;
  shared->overlap = options.overlap_with_forward;
  ddp.register_comm_hook([shared](dist::ProcessGroup& g, GradBucket& b) {
    return shared->reduce_scatter_hook(g, b);
  });
  // Without the option the next forward waits for every all-gather first;
  // with it each layer waits for its own (the pre-hooks below), and the end
  // of the forward for those no layer asked for.
  ddp.register_forward_pre_hook([shared]() {
    if (!shared->overlap) shared->finish_all_gather();
  });
  if (!options.overlap_with_forward) return;
  ddp.register_forward_post_hook([shared]() { shared->finish_all_gather(); });
  std::unordered_map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < shared->params.size(); ++i) index.emplace(shared->params[i].impl(), i);
  for (const auto& [path, m] : module.named_modules()) {
    std::vector<size_t> own;
    for (const auto& [name, p] : m->named_parameters(/*recurse=*/false)) {
      auto it = index.find(p.impl());
      if (it != index.end()) own.push_back(it->second);
    }
    if (own.empty()) continue;
    // The buckets are looked up at each call: load_peer_shards re-cuts them.
    layer_hooks_.push_back(m->register_forward_pre_hook([shared, own](nn::Module&, Tensors&) {
      for (size_t i : own) shared->finish_bucket(shared->bucket_of[i]);
    }));
  }
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::shared_ptr<ZeroShared> shared,
                                                 LocalOptimizerFactory make_local)
    : Optimizer("ZeroRedundancyOptimizer", {optim::ParamGroup{shared->segment_params, 0.0, 0.0}},
                0.0, 0.0),
      shared_(std::move(shared)) {
  DDP_CHECK_T(ValueError, make_local != nullptr,
              "ZeroRedundancyOptimizer: no local optimizer factory given (use zero_sgd or "
              "zero_adamw)");
  make_local_ = make_local;
  local_ = make_local({optim::ParamGroup{shared_->segment_params, {}, {}}});
  DDP_CHECK_T(ValueError, local_ != nullptr, "ZeroRedundancyOptimizer: the factory built nothing");
  DDP_CHECK_T(ValueError, local_->name() == "SGD" || local_->name() == "AdamW",
              "ZeroRedundancyOptimizer: unsupported optimizer '{}'; only SGD and AdamW (whose "
              "update is elementwise) can step a shard",
              local_->name());
  DDP_CHECK_T(ValueError, local_->param_groups().size() == 1,
              "ZeroRedundancyOptimizer: the local optimizer must have one parameter group, got {}",
              local_->param_groups().size());
  param_groups()[0].lr = local_->param_groups()[0].lr;
  param_groups()[0].weight_decay = local_->param_groups()[0].weight_decay;
}

// Note [ZeRO-1 overlapped with the forward]: the layers' hooks go with the
// optimizer, and what they would have waited for lands now (the DDP's own
// pre-hook, which stays, finishes nothing once nothing is pending).
ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  if (layer_hooks_.empty()) return;
  try {
    shared_->finish_all_gather();
  } catch (const std::exception& e) {
    DDP_LOG_ERROR("ZeroRedundancyOptimizer: the last step's all-gather failed: {}", e.what());
  }
  for (nn::HookHandle& h : layer_hooks_) h.remove();
}

void ZeroRedundancyOptimizer::synchronize_parameters() { shared_->finish_all_gather(); }

const std::vector<ZeroSegment>& ZeroRedundancyOptimizer::segments() const {
  return shared_->segments;
}

const ZeroOptions& ZeroRedundancyOptimizer::options() const { return options_; }

std::vector<size_t> ZeroRedundancyOptimizer::pending_gathers() const {
  std::vector<size_t> out;
  for (size_t b = 0; b < shared_->buckets.size(); ++b)
    if (shared_->buckets[b].gather_pending) out.push_back(b);
  return out;
}

std::vector<size_t> ZeroRedundancyOptimizer::last_gather_order() const {
  return shared_->gather_order;
}

size_t ZeroRedundancyOptimizer::state_bytes() const { return optimizer_state_bytes(*local_); }

optim::Optimizer& ZeroRedundancyOptimizer::local_optimizer() { return *local_; }

void ZeroRedundancyOptimizer::update_group(const optim::ParamGroup& group, const Tensors&,
                                           const Tensors&, const std::vector<TensorDict*>&) {
  // A scheduler changes this optimizer's group; the local one follows.
  local_->param_groups()[0].lr = group.lr;
  local_->param_groups()[0].weight_decay = group.weight_decay;
  if (shared_->overlap) {
    shared_->step_and_launch(*local_);  // Note [ZeRO-1 overlapped with the forward]
    return;
  }
  local_->step();
  shared_->launch_all_gather();
}

// Note [ZeRO-1 with GradScaler and clipping]
bool ZeroRedundancyOptimizer::found_inf_anywhere(bool local_found_inf) {
  dist::ProcessGroup& g = *shared_->group;
  const Device on = dist::control_device(g, segments_device());
  Tensor flag = Tensor::full({1}, local_found_inf ? 1.0 : 0.0, TensorOptions(DType::f64)).to(on);
  g.allreduce({flag}, dist::ReduceOp::max)->wait(g.timeout());
  return flag.cpu().item<double>() != 0.0;
}

Device ZeroRedundancyOptimizer::segments_device() const {
  return shared_->segment_params.front().device();
}

double ZeroRedundancyOptimizer::clip_grad_norm_(double max_norm, double norm_type) {
  const char* who = "ZeroRedundancyOptimizer.clip_grad_norm_";
  DDP_CHECK(max_norm >= 0, "{}: max_norm must be >= 0, got {}", who, max_norm);
  DDP_CHECK(norm_type > 0, "{}: norm_type must be > 0 (or INFINITY), got {}", who, norm_type);
  Tensors grads;
  for (const Tensor& p : shared_->segment_params)
    if (p.grad().defined()) grads.push_back(p.grad());
  NoGradGuard no_grad;
  const double local = grads.empty() ? 0.0 : optim::multi_tensor::pow_sum(grads, norm_type);
  dist::ProcessGroup& g = *shared_->group;
  const Device on = dist::control_device(g, segments_device());
  Tensor t = Tensor::full({1}, local, TensorOptions(DType::f64)).to(on);
  g.allreduce({t}, std::isfinite(norm_type) ? dist::ReduceOp::sum : dist::ReduceOp::max)
      ->wait(g.timeout());
  const double sum = t.cpu().item<double>();
  double total = sum;
  if (std::isfinite(norm_type) && norm_type != 1)
    total = norm_type == 2 ? std::sqrt(sum) : std::pow(sum, 1.0 / norm_type);
  // The coefficient of optim::clip_grad_norm_, so both clip alike.
  const double coef = max_norm / (total + 1e-6);
  const double clamped = coef < 1.0 || std::isnan(coef) ? coef : 1.0;
  if (clamped != 1.0 && !grads.empty())
    optim::multi_tensor::mul_(grads, clamped, /*check_finite=*/false);
  return total;
}

TensorDict ZeroRedundancyOptimizer::options_state() const { return {}; }

void ZeroRedundancyOptimizer::load_options(const TensorDict&) {
  DDP_THROW(ValueError,
            "ZeroRedundancyOptimizer: load_state_dict takes no sharded state; use "
            "load_sharded_state_dict (or load_shards) with every rank's shard");
}

std::vector<std::string> ZeroRedundancyOptimizer::state_names() const { return {}; }

}  // namespace ddp::parallel
