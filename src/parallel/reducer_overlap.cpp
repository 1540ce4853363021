// The Reducer's part of an overlapped step (Note [Overlapped step] in
// reducer.h): the held-back tail of backward, and buckets finished one at a
// time during the next forward.

#include <algorithm>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/parallel/reducer.h"
#include "ddp/tensor/ops.h"
#include "parallel/reducer_bucket.h"

namespace ddp::parallel {

void Reducer::set_overlap(bool on, int priority_buckets) {
  DDP_CHECK_T(ValueError, priority_buckets >= 1,
              "DistributedDataParallel: priority_buckets must be >= 1, got {}", priority_buckets);
  DDP_CHECK_T(ValueError, !armed_,
              "DistributedDataParallel: the overlapped step is switched between iterations, not "
              "while a synchronised backward is pending");
  finish_all();
  overlap_ = on;
  priority_buckets_ = priority_buckets;
}

const std::vector<size_t>& Reducer::bucket_members(size_t b) const {
  DDP_CHECK(b < buckets_.size(), "Reducer::bucket_members: bucket {} of {}", b, buckets_.size());
  return buckets_[b]->params;
}

// The last buckets of backward, launched at its end in reverse order. Not
// under Join, whose shadows launch in bucket order (launch_at_end_ is set
// there whenever the order matters).
size_t Reducer::held_back() const {
  if (!overlap_ || launch_at_end_) return 0;
  return std::min(buckets_.size(), size_t(priority_buckets_));
}

void Reducer::launch_held_back() {
  const size_t held = held_back();
  const size_t first = buckets_.size() - held;
  if (held == 0 || next_launch_ != first) return;
  for (size_t i = first; i < buckets_.size(); ++i)
    if (buckets_[i]->pending != 0) return;  // left to the error of finalize_backward
  for (size_t i = buckets_.size(); i-- > first;) launch_bucket(i);
  next_launch_ = buckets_.size();
}

// Whether this backward may end without waiting: not when it ends with the
// used-flags allreduce (which needs every bucket's flags first), under Join
// (scaled gradients, a fixed order), or with overlap off.
bool Reducer::overlap_this_backward() const {
  return overlap_ && !launch_at_end_ && grad_scale_ == 1.0 && !syncs_used_flags();
}

void Reducer::begin_overlap() {
  for (auto& b : buckets_) b->finished = false;
  finished_buckets_ = 0;
  overlap_pending_ = true;
  // Note [Static graph]: the flags of the first iteration hold for all.
  overlap_used_ = static_global_used_.empty() ? std::vector<char>(params_.size(), 1)
                                              : static_global_used_;
  ready_times_.assign(params_.size(), std::chrono::nanoseconds(-1));
  for (size_t i = 0; i < params_.size(); ++i)
    if (used_[i])
      ready_times_[i] =
          std::chrono::duration_cast<std::chrono::nanoseconds>(ready_at_[i] - backward_start_);
  // Due at the next forward on every rank alike (the forward finishes the
  // buckets first), whenever this rank happens to finish them.
  if (!rebuilt_ && options_.rebuild_buckets &&
      (!options_.find_unused_parameters || options_.static_graph))
    rebuild_due_ = true;
}

void Reducer::finish_bucket(size_t index) {
  if (!overlap_pending_) return;
  DDP_CHECK(index < buckets_.size(), "Reducer::finish_bucket: bucket {} of {}", index,
            buckets_.size());
  Bucket& b = *buckets_[index];
  if (b.finished) return;
  try {
    b.work.work->wait(group_->timeout());
    if (auto e = b.work.work->exception()) std::rethrow_exception(e);
    if (b.work.finish) b.work.finish();
  } catch (...) {
    abandon_overlap(b.timing.index);
    throw;
  }
  b.finished = true;
  b.launched = false;
  b.timing.done = b.work.work->completed_at();
  b.work = BucketWork{};
  for (size_t i : b.params) copy_back_param(i, overlap_used_[i]);
  if (++finished_buckets_ == buckets_.size()) complete_overlap();
}

void Reducer::finish_all() {
  for (size_t b = 0; overlap_pending_ && b < buckets_.size(); ++b) finish_bucket(b);
}

// What finalize_backward does after its wait, once every bucket finished.
void Reducer::complete_overlap() {
  overlap_pending_ = false;
  timeline_.clear();
  for (const auto& b : buckets_) timeline_.push_back(b->timing);
  ++synchronised_backwards_;
  saved_unused_grads_.assign(params_.size(), Tensor());
}

// Note [Bucket errors], one forward late: the other buckets are let finish,
// every .grad is cleared and the buffers are abandoned.
void Reducer::abandon_overlap(int failed_bucket) {
  overlap_pending_ = false;
  for (auto& b : buckets_) b->finished = true;
  wait_launched_quietly();
  discard_gradients();
  detach_failed_buffers();
  DDP_LOG_ERROR(
      "DistributedDataParallel (rank {}): the communication of bucket {} failed; the gradients "
      "of the last backward were discarded (every .grad cleared), and the parameters of the "
      "buckets finished before it were already stepped",
      group_->rank(), failed_bucket);
}

}  // namespace ddp::parallel
