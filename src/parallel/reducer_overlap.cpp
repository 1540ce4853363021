// The Reducer's part of an overlapped step (Note [Overlapped step] in
// reducer.h): the held-back tail of backward, and buckets finished one at a
// time during the next forward.

#include <algorithm>
#include <cmath>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/parallel/reducer.h"
#include "ddp/tensor/ops.h"
#include "parallel/reducer_bucket.h"

namespace ddp::parallel {

void Reducer::check_overlap_chunks(const OverlapChunks& chunks, const char* who) {
  DDP_CHECK_T(ValueError, std::isfinite(chunks.chunk_mb) && chunks.chunk_mb >= 0,
              "{}: chunk_mb must be >= 0 (0: whole buckets), got {}", who, chunks.chunk_mb);
  DDP_CHECK_T(ValueError, chunks.issue_ratio > 0 && chunks.issue_ratio <= 1,
              "{}: issue_ratio must be in (0, 1] (1: every chunk as soon as its bucket is ready), "
              "got {}",
              who, chunks.issue_ratio);
}

void Reducer::set_overlap(bool on, int priority_buckets, OverlapChunks chunks) {
  DDP_CHECK_T(ValueError, priority_buckets >= 1,
              "DistributedDataParallel: priority_buckets must be >= 1, got {}", priority_buckets);
  check_overlap_chunks(chunks, "DistributedDataParallel");
  DDP_CHECK_T(ValueError, !armed_,
              "DistributedDataParallel: the overlapped step is switched between iterations, not "
              "while a synchronised backward is pending");
  finish_all();
  overlap_ = on;
  priority_buckets_ = priority_buckets;
  chunks_ = chunks;
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
  if (chunked_) {
    issue_remaining_chunks();  // Note [Overlap chunks]: the held-back tail leads
  } else {
    for (size_t i = buckets_.size(); i-- > first;) launch_bucket(i);
  }
  next_launch_ = buckets_.size();
}

// ---- Note [Overlap chunks] ----------------------------------------------------

// Bucket b's slices, in order: chunk_mb each (at least one element), the
// last one what is left; an empty bucket is one empty chunk (as it is one
// empty allreduce whole).
void Reducer::plan_chunks(size_t index) {
  Bucket& b = *buckets_[index];
  const int64_t numel = b.buffer.numel();
  const double fit =
      std::floor(chunks_.chunk_mb * 1024.0 * 1024.0 / double(element_size(b.buffer.dtype())));
  const int64_t per_chunk = fit >= double(numel) ? std::max<int64_t>(numel, 1)
                                                 : std::max<int64_t>(1, int64_t(fit));
  b.chunks.clear();
  b.chunks_issued = 0;
  int64_t offset = 0;
  do {
    b.chunks.push_back({offset, std::min(per_chunk, numel - offset), nullptr});
    offset += per_chunk;
  } while (offset < numel);
}

// Bucket b was released (in bucket order): its chunks join the queue, and
// the queue's head goes out as far as the budget allows.
void Reducer::release_chunks(size_t index) {
  plan_chunks(index);
  chunk_queue_.push_back(index);
  released_bytes_ += buckets_[index]->buffer.nbytes();
  issue_chunks_within_budget();
}

// Issues chunks from the queue's head while the bytes issued stay within
// issue_ratio times the bytes released: a function of the release sequence
// only, the same on every rank.
void Reducer::issue_chunks_within_budget() {
  const auto budget = uint64_t(chunks_.issue_ratio * double(released_bytes_));
  while (chunk_queue_head_ < chunk_queue_.size()) {
    const size_t index = chunk_queue_[chunk_queue_head_];
    Bucket& b = *buckets_[index];
    if (b.chunks_issued == b.chunks.size()) {
      ++chunk_queue_head_;
      continue;
    }
    const uint64_t bytes =
        uint64_t(b.chunks[b.chunks_issued].numel) * uint64_t(element_size(b.buffer.dtype()));
    if (issued_bytes_ + bytes > budget) return;
    issue_chunk(index, /*at_end=*/false);
  }
}

// The end of backward: every chunk not yet issued, in the order the next
// forward needs its bucket (the last bucket first).
void Reducer::issue_remaining_chunks() {
  for (size_t i = next_launch_; i < buckets_.size(); ++i) plan_chunks(i);  // the held-back tail
  for (size_t i = buckets_.size(); i-- > 0;) {
    Bucket& b = *buckets_[i];
    while (b.chunks_issued < b.chunks.size()) issue_chunk(i, /*at_end=*/true);
  }
  chunk_queue_head_ = chunk_queue_.size();
}

void Reducer::issue_chunk(size_t index, bool at_end) {
  Bucket& b = *buckets_[index];
  Bucket::Chunk& c = b.chunks[b.chunks_issued];
  const auto now = BucketTiming::Clock::now();
  if (b.chunks_issued == 0) b.timing.launched = now;
  if (launched_this_backward_++ == 0) ++launched_iterations_;
  // Note [Desync report]: the flight recorder names the bucket and chunk.
  dist::CollectiveTag tag(fmt::format("ddp bucket {} of {} chunk {} of {}, iteration {}", index + 1,
                                      buckets_.size(), b.chunks_issued + 1, b.chunks.size(),
                                      launched_iterations_));
  Tensor slice = b.buffer.narrow(0, c.offset, c.numel);
  c.work = group_->allreduce({slice}, dist::ReduceOp::avg);
  DDP_CHECK(c.work != nullptr, "DistributedDataParallel: no work for bucket {} chunk {}", index,
            b.chunks_issued);
  b.launched = true;
  issued_bytes_ += uint64_t(c.numel) * uint64_t(element_size(b.buffer.dtype()));
  chunk_launches_.push_back({int(index), int(b.chunks_issued), c.offset, c.numel, at_end});
  ++b.chunks_issued;
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
  BucketTiming::Clock::time_point done{};
  try {
    if (b.chunks.empty()) {
      b.work.work->wait(group_->timeout());
      if (auto e = b.work.work->exception()) std::rethrow_exception(e);
      if (b.work.finish) b.work.finish();
      done = b.work.work->completed_at();
    } else {  // Note [Overlap chunks]: every chunk, in order
      for (const Bucket::Chunk& c : b.chunks) {
        c.work->wait(group_->timeout());
        if (auto e = c.work->exception()) std::rethrow_exception(e);
        done = std::max(done, c.work->completed_at());
      }
    }
  } catch (...) {
    abandon_overlap(b.timing.index);
    throw;
  }
  b.finished = true;
  b.launched = false;
  b.timing.done = done;
  b.work = BucketWork{};
  b.chunks.clear();
  b.chunks_issued = 0;
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
