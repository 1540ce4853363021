// DistributedDataParallel::overlap_step: the optimizer's step applied one
// bucket at a time in the next forward. See Note [Overlapped step] in
// reducer.h and Note [Deferred optimizer steps] in ddp/optim/optimizer.h.

#include <unordered_map>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/parallel/distributed.h"

namespace ddp::parallel {

struct DistributedDataParallelBase::OverlapState {
  optim::Optimizer* optimizer = nullptr;  // null once the optimizer is destroyed
  std::shared_ptr<optim::Optimizer::Deferral> deferral;
  std::vector<int64_t> number;  // by DDP parameter: the optimizer's number, or -1
  std::vector<nn::HookHandle> hooks;
  // A recorded step (and zero_grad), with the groups' hyperparameters of
  // the moment it was recorded, and the buckets it was applied to so far.
  bool step_due = false;
  std::vector<optim::Optimizer::GroupHyper> hyper;
  int zero_due = -1;  // -1: none, 0: zero in place, 1: set to none
  std::vector<char> applied;
  size_t applied_count = 0;
};

void DistributedDataParallelBase::refuse_with_overlap(const char* what) const {
  DDP_CHECK_T(ValueError, overlap_ == nullptr,
              "DistributedDataParallel::{}: not with overlap_step (Note [Overlapped step])", what);
}

void DistributedDataParallelBase::overlap_step(optim::Optimizer& optimizer, int priority_buckets,
                                               OverlapChunks chunks) {
  const char* who = "DistributedDataParallel::overlap_step";
  DDP_CHECK_T(ValueError, overlap_ == nullptr, "{}: called twice (one optimizer per model)", who);
  DDP_CHECK_T(ValueError, comm_hook_ == nullptr,
              "{}: a communication hook (PowerSGD, ZeRO-1, ...) is registered; the overlapped step "
              "applies a plain optimizer to averaged gradients (for ZeRO-1, whose all-gather is "
              "overlapped with the next forward by ZeroOptions::overlap_with_forward, do not call "
              "overlap_step)",
              who);
  DDP_CHECK_T(ValueError, !options_.fault_tolerant,
              "{}: not with fault_tolerant (a failed bucket can leave a step half-applied)", who);
  DDP_CHECK_T(ValueError, priority_buckets >= 1, "{}: priority_buckets must be >= 1, got {}", who,
              priority_buckets);
  Reducer::check_overlap_chunks(chunks, who);
  DDP_CHECK_T(ValueError, !optimizer.has_deferral(),
              "{}: the {} optimizer's steps are deferred already (by another model)", who,
              optimizer.name());

  auto state = std::make_shared<OverlapState>();
  state->optimizer = &optimizer;
  // The reducer's numbering: the trainable parameters in named order.
  const Tensors trainable = tuner_params();
  std::unordered_map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < trainable.size(); ++i) index.emplace(trainable[i].impl(), i);
  state->number.assign(trainable.size(), -1);
  int64_t k = 0;
  for (const optim::ParamGroup& g : optimizer.param_groups())
    for (const Tensor& p : g.params) {
      auto it = index.find(p.impl());
      DDP_CHECK_T(ValueError, it != index.end(),
                  "{}: parameter {} of the {} optimizer ({}) is not a trainable parameter of the "
                  "wrapped module; the overlapped step can only apply what the module's forward "
                  "reaches",
                  who, k, optimizer.name(), p.describe());
      state->number[it->second] = k++;
    }

  auto deferral = std::make_shared<optim::Optimizer::Deferral>();
  deferral->step = [this] { overlap_record_step(); };
  deferral->zero_grad = [this](bool set_to_none) { overlap_record_zero_grad(set_to_none); };
  deferral->synchronize = [this] { synchronize_step(); };
  deferral->on_destroy = [this] {
    if (overlap_) overlap_->optimizer = nullptr;
  };
  optimizer.set_deferral(deferral);
  state->deferral = deferral;

  // One pre-hook per layer that owns parameters: it finishes and steps the
  // buckets of those parameters (Note [Forward hooks] in ddp/nn/hooks.h).
  for (const auto& [path, m] : module_base_->named_modules()) {
    std::vector<size_t> own;
    for (const auto& [name, p] : m->named_parameters(/*recurse=*/false)) {
      auto it = index.find(p.impl());
      if (it != index.end()) own.push_back(it->second);
    }
    if (own.empty()) continue;
    state->hooks.push_back(m->register_forward_pre_hook([this, own](nn::Module&, Tensors&) {
      if (!overlap_ || (!overlap_->step_due && !reducer_->overlap_pending())) return;
      for (size_t i : own) overlap_apply_bucket(reducer_->bucket_of(i));
    }));
  }
  overlap_ = std::move(state);
  reducer_->set_overlap(join_ == nullptr, priority_buckets, chunks);
}

void DistributedDataParallelBase::overlap_follow_join(bool in_join) {
  // The reducer's own schedule: the tuner may have chosen it (Note
  // [Overlapped step model]).
  reducer_->set_overlap(!in_join, reducer_->priority_buckets(), reducer_->overlap_chunks());
}

void DistributedDataParallelBase::overlap_apply_bucket(size_t bucket) {
  reducer_->finish_bucket(bucket);
  OverlapState& s = *overlap_;
  if (!s.step_due || s.applied[bucket]) return;
  std::vector<size_t> numbers;
  for (size_t i : reducer_->bucket_members(bucket))
    if (s.number[i] >= 0) numbers.push_back(size_t(s.number[i]));
  if (s.optimizer != nullptr) {
    s.optimizer->step_parameters(numbers, s.hyper);
    if (s.zero_due >= 0) s.optimizer->zero_grad_parameters(numbers, s.zero_due == 1);
  }
  s.applied[bucket] = 1;
  if (++s.applied_count == s.applied.size()) {
    s.step_due = false;
    s.zero_due = -1;
  }
}

void DistributedDataParallelBase::overlap_apply_all() {
  reducer_->finish_all();
  for (size_t b = 0; overlap_->step_due && b < overlap_->applied.size(); ++b)
    overlap_apply_bucket(b);
}

void DistributedDataParallelBase::synchronize_step() {
  if (overlap_) overlap_apply_all();
}

void DistributedDataParallelBase::overlap_record_step() {
  OverlapState& s = *overlap_;
  // A second step() before any forward: the first is applied now, as
  // plain steps would be, one after the other.
  if (s.step_due) overlap_apply_all();
  s.step_due = true;
  s.hyper = s.optimizer->group_hyperparameters();
  s.applied.assign(reducer_->num_buckets(), 0);
  s.applied_count = 0;
  s.zero_due = -1;
}

void DistributedDataParallelBase::overlap_record_zero_grad(bool set_to_none) {
  OverlapState& s = *overlap_;
  if (s.step_due) {
    s.zero_due = set_to_none ? 1 : 0;  // after each bucket's step
    return;
  }
  // Nothing to step first: clear now (after any communication in flight,
  // which would otherwise write into the cleared gradients).
  reducer_->finish_all();
  std::vector<size_t> all;
  for (int64_t n : s.number)
    if (n >= 0) all.push_back(size_t(n));
  s.optimizer->zero_grad_parameters(all, set_to_none);
}

// The destructor's part: a recorded step is applied (as plain DDP would
// have applied it already), and the optimizer is released.
void DistributedDataParallelBase::overlap_detach() {
  if (!overlap_) return;
  try {
    overlap_apply_all();
  } catch (const std::exception& e) {
    DDP_LOG_ERROR("DistributedDataParallel: the pending overlapped step was not applied: {}",
                  e.what());
  }
  for (nn::HookHandle& h : overlap_->hooks) h.remove();
  if (overlap_->optimizer != nullptr) {
    overlap_->deferral->on_destroy = nullptr;
    overlap_->optimizer->set_deferral(nullptr);
  }
  overlap_.reset();
}

}  // namespace ddp::parallel
