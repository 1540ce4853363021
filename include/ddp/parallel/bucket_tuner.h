#pragma once
// Automatic bucket sizes (DDPOptions::auto_bucket_size): a planner that
// chooses gradient buckets from the measured backward timeline and the
// link's measured latency and bandwidth, and the tuner that runs it once
// inside DistributedDataParallel.
//
// Note [Exposed communication model]
// Buckets are contiguous runs of parameters in the order their gradients
// become ready, launched in that order (Note [Launch order]); one
// collective runs at a time (a process group runs its collectives in
// order). Bucket k starts when its last gradient is ready and bucket k-1
// has finished, and takes alpha + beta * bytes (the alpha-beta model of one
// allreduce). The exposed communication is what is left after the last
// gradient is ready: max(0, end of the last bucket - last ready time). Few
// big buckets start late; many small ones pay alpha each. For this model
// the best contiguous split is found exactly by dynamic programming:
// end(j) = min over i < j of max(end(i), ready(j-1)) + alpha + beta * bytes(i..j),
// which is monotone in end(i), so the earliest end of every prefix is
// optimal for every longer prefix (O(n^2) for n parameters).
//
// Note [Alpha-beta fit]
// alpha (seconds per collective) and beta (seconds per byte) come from a
// line through a few timed allreduces of different sizes (4 KiB up to half
// of the gradients) on the group itself, so they include the algorithm (a
// ring sends 2(N-1)/N of the bytes), the link shaping and the CPU cost of
// reducing. The line is fitted to relative errors (weights 1/time^2): with
// plain least squares the millisecond noise of the large collectives
// decides the intercept, and an alpha of 0 makes the planner choose many
// tiny buckets that each pay the real latency.
//
// Note [Overlapped step model]
// With DistributedDataParallel::overlap_step the exposed communication is
// what the next forward waits for, and the schedule has more knobs: the
// bucket cap, how many first-layer buckets are held back (priority), the
// chunk size and the issue ratio (Note [Overlap chunks] in reducer.h). The
// model replays the reducer's rule exactly on the alpha-beta link: buckets
// are released in bucket order (bucket k when it and every earlier one are
// ready), the held-back tail excepted; each release queues the bucket's
// chunks and issues the queue's head while the bytes issued stay within
// issue_ratio times the bytes released; at the end of backward (the last
// ready time) every chunk left goes out, the last bucket first; the link
// runs one collective at a time in issue order, each taking alpha + beta *
// bytes, so a chunk pays alpha again (the CPU and latency a collective
// costs). The next forward needs bucket k when it reaches the layers whose
// gradients made it ready: forward_ratio * (end of backward - bucket k's
// ready time) after the forward starts, the forward running the backward's
// layers in reverse at forward_ratio of their speed (0.5: a layer's forward
// is about half its backward's FLOPs). Buckets are waited for in the order
// they are needed, and each wait delays everything after it; the exposed
// time is the sum of the waits. The optimizer step the forward applies per
// bucket is not modelled (it is the same work in every schedule). With one
// priority bucket and whole buckets the link runs exactly as in the
// synchronous model, and since no bucket is needed before the end of
// backward the prediction never exceeds the synchronous one; holding more
// back or chunking may do better or worse, which is what the planner weighs.

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/parallel/reducer.h"

namespace ddp::parallel {

class Reducer;

struct AlphaBeta {
  double alpha_s = 0;        // fixed cost of one collective, seconds
  double beta_s_per_byte = 0;  // seconds per byte of the buffer
  double time_s(double bytes) const { return alpha_s + beta_s_per_byte * bytes; }
};

// The line time = alpha + beta * bytes through (bytes[k], seconds[k]),
// least squares of the relative errors (Note [Alpha-beta fit]).
// ValueError for fewer than two distinct sizes, mismatched lengths, or a
// negative or non-finite sample. A negative intercept or slope (noise) is
// clamped to 0.
AlphaBeta fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds);

// Times allreduces of each size (bytes, of the given dtype on `device`) on
// `group`, `repeats` times each, and fits them. A collective: every rank
// calls it with the same arguments. The median of the repeats is used.
AlphaBeta measure_alpha_beta(dist::ProcessGroup& group, const Device& device, DType dtype,
                             const std::vector<size_t>& sizes, int repeats = 3);

// One parameter as the planner sees it.
struct GradInfo {
  double ready_s = 0;  // when its gradient became ready (any common origin)
  size_t bytes = 0;
};

// The exposed communication (Note [Exposed communication model]) of
// `buckets` (parameter indices into `grads`; launch order) for these ready
// times. ValueError when the buckets are not a partition of the parameters.
double simulate_exposed_s(const std::vector<GradInfo>& grads,
                          const std::vector<std::vector<size_t>>& buckets, const AlphaBeta& link);

struct BucketPlan {
  std::vector<std::vector<size_t>> buckets;  // parameter indices, launch order
  double predicted_exposed_s = 0;
};

// The partition of the parameters, in ready order, into contiguous buckets
// that minimises the exposed communication (the dynamic programme of
// Note [Exposed communication model]). Ties in ready time keep index order
// reversed (later-registered first, as backward produces them). ValueError
// for no parameters, a negative or non-finite time, or a non-finite link.
BucketPlan plan_buckets(const std::vector<GradInfo>& grads, const AlphaBeta& link);

// The parameters, in ready order, in contiguous buckets of at most
// cap_bytes each (a gradient larger than the cap is a bucket alone).
// ValueError for no parameters, a bad ready time or cap_bytes == 0.
std::vector<std::vector<size_t>> buckets_by_cap(const std::vector<GradInfo>& grads,
                                                size_t cap_bytes);

// One overlapped-step schedule (Note [Overlapped step model]).
struct OverlapSchedule {
  int priority_buckets = 1;  // >= 1
  OverlapChunks chunks;      // chunk_mb >= 0 (0: whole buckets), issue_ratio in (0, 1]
  double forward_ratio = 0.5;  // >= 0: the forward's speed relative to the backward's
};

// The time the next forward waits for communication under `schedule`, for
// `buckets` (parameter indices, launch order). ValueError as
// simulate_exposed_s, and for a schedule out of range.
double simulate_overlap_exposed_s(const std::vector<GradInfo>& grads,
                                  const std::vector<std::vector<size_t>>& buckets,
                                  const AlphaBeta& link, const OverlapSchedule& schedule);

struct OverlapPlan {
  double bucket_cap_mb = 0;
  std::vector<std::vector<size_t>> buckets;  // parameter indices, launch order
  OverlapSchedule schedule;
  double predicted_exposed_s = 0;
  size_t collectives = 0;  // per step, chunks counted
};

// The candidate schedule the model predicts the least waiting for: bucket
// caps of 1, 2, 5, 10 and 25 MiB (buckets_by_cap), 1 to 4 priority
// buckets, whole buckets or chunks of 1, 2 and 4 MiB (smaller than the
// largest bucket), issue ratios 1 and 0.9. Ties (within 1 us) go to fewer collectives,
// then to the larger cap. ValueError as plan_buckets, and for a negative
// forward_ratio.
OverlapPlan plan_overlap(const std::vector<GradInfo>& grads, const AlphaBeta& link,
                         double forward_ratio = 0.5);

// Runs inside DistributedDataParallel when auto_bucket_size is on: watches
// the synchronised backward passes, and after `iterations` of them (the
// first is skipped as warm-up) measures the link, lets rank 0 plan from the
// median ready times, broadcasts the plan, and rebuilds the reducer's
// buckets once. With the overlapped step on (the reducer's overlap()), the
// plan is plan_overlap's: its buckets, priority buckets and chunks are
// installed together (Note [Overlapped step model]). Logs the choice and
// the predicted exposed time.
class BucketAutoTuner {
 public:
  // params: the reducer's parameters, in its order. ValueError for
  // iterations < 1.
  BucketAutoTuner(Tensors params, int iterations);
  // At every forward, before the reducer is armed. A collective once tuning
  // is due: every rank calls it at the same forward.
  void on_forward(Reducer& reducer, dist::ProcessGroup& group);
  bool done() const { return done_; }
  // Marks the choice as made (Note [Bucket plans in checkpoints]): the
  // caller has installed `plan` in the reducer.
  void restore(BucketPlan plan, AlphaBeta link);
  const BucketPlan& plan() const { return plan_; }
  const AlphaBeta& link() const { return link_; }
  // The overlapped step's schedule the tuner chose (and installed); unset
  // without overlap or before tuning.
  const std::optional<OverlapSchedule>& overlap_schedule() const { return overlap_schedule_; }
  void restore_overlap_schedule(std::optional<OverlapSchedule> s) { overlap_schedule_ = s; }

 private:
  void tune(Reducer& reducer, dist::ProcessGroup& group);

  Tensors params_;
  int iterations_;
  bool done_ = false;
  int seen_ = 0;
  uint64_t last_seen_ = 0;  // Reducer::synchronised_backwards() at the last sample
  std::vector<std::vector<double>> samples_;  // per synchronised backward: ready times (s)
  BucketPlan plan_;
  AlphaBeta link_;
  std::optional<OverlapSchedule> overlap_schedule_;
};

}  // namespace ddp::parallel
