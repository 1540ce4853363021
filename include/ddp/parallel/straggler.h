#pragma once
// StragglerDetector: names a rank that is persistently slower than the
// others (its gradients arrive late in most steps), from the reducer's own
// bucket timeline, at the cost of one tiny allgather every `interval` steps.
//
//   parallel::StragglerDetector stragglers(group, {.interval = 10});
//   for (...) {                              // every rank, every step
//     loss.backward();
//     opt.step();
//     stragglers.observe(ddp.reducer());     // a collective every 10th call
//   }
//   stragglers.score(r);                     // in [0, 1], the same on every rank
//
// Note [Straggler score]
// Clocks of different nodes differ, so no timestamp crosses ranks: each
// rank measures a duration on its own clock, its *tail wait* = the
// completion of its last bucket's allreduce minus the moment its last
// gradient was ready (from Reducer::last_timeline()). An allreduce ends on
// every rank at about the same time, when the last rank has contributed, so
// a rank that computes slowly (in forward, backward, data loading or the
// previous optimizer step) makes every peer wait for it while it itself
// waits least. A step's waits w_0..w_{n-1} therefore name at most one late
// rank: the one with the smallest wait, when the next smallest exceeds it by
// a clear margin,
//     w_(2) - w_(1) >= max(min_delay_ms, relative_margin * w_(2)),
// i.e. every other rank waited for it (two equally slow ranks name
// neither: the rule finds a single outlier). The gap w_(2) - w_(1) is how
// long the others waited for it: its delay. A rank's score is the number
// of the last `window` measured steps in which it was the late rank,
// divided by `window` (also while fewer have been measured: a rank is named
// only after threshold * window late steps, never by a few noisy first
// steps), in [0, 1]; its typical delay is the mean delay over those steps.
// A step in which some rank had no synchronised backward (no_sync, no
// buckets) is not measured.
//
// Cost: each rank appends one double per step to a local buffer; every
// `interval` steps the ranks allgather those `interval` doubles (8 *
// interval bytes each) and every rank scores them identically, so every
// rank holds every rank's score and no rank has to be asked. With the
// default interval of 10 that is one small collective per 10 steps, next to
// the model's gradient buckets in every step. observe() is a collective:
// every rank must call it once per step, in the same order with respect to
// the group's other collectives (call it between steps).
//
// When a rank's score reaches `threshold` rank 0 logs one warning naming
// it, its score and its typical delay; when it falls below again, one info
// line. Nothing is logged in between (once per change).

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "ddp/core/device.h"
#include "ddp/dist/process_group.h"
#include "ddp/parallel/reducer.h"

namespace ddp::parallel {

struct StragglerOptions {
  int64_t interval = 10;         // steps between exchanges (>= 1)
  int64_t window = 100;          // measured steps a score covers (>= 1); see the Note
  double threshold = 0.5;        // a score at or above this names the rank, in (0, 1]
  double min_delay_ms = 2.0;     // smallest gap that counts as late (>= 0)
  double relative_margin = 0.5;  // gap as a share of the next smallest wait, in [0, 1)
  bool log = true;               // rank 0 logs the changes (Note [Straggler score])
};

// Raises ValueError naming the first option out of range.
void check_straggler_options(const StragglerOptions& options);

// The tail wait of one synchronised backward, in seconds (Note [Straggler
// score]); nullopt for an empty timeline.
std::optional<double> tail_wait_seconds(const std::vector<BucketTiming>& timeline);

// The rank that was late in one step, given every rank's tail wait in
// seconds (NaN: not measured), or -1 for none (a single rank, a step not
// measured on some rank, no clear outlier).
int late_rank(const std::vector<double>& waits_s, const StragglerOptions& options);

class StragglerDetector {
 public:
  // device: where the exchange tensor lives (a GPU for nccl groups).
  // ValueError for bad options (check_straggler_options).
  StragglerDetector(std::shared_ptr<dist::ProcessGroup> group, StragglerOptions options = {},
                    Device device = Device());

  // Once per step on every rank, after the step's synchronised backward.
  // Returns true when this call exchanged and rescored (every `interval`-th
  // call). The Reducer overload measures nothing for a step without a new
  // synchronised backward.
  bool observe(const Reducer& reducer);
  bool observe(const std::vector<BucketTiming>& timeline);
  // Same, with this rank's tail wait measured by the caller (NaN: none).
  bool observe_wait(double wait_s);

  // The scoring rule alone, without communication: one step's waits, one
  // per rank (tests, or a caller that exchanged them itself); ValueError
  // unless there is one per rank.
  void add_step(const std::vector<double>& waits_s);

  int world_size() const { return int(scores_.size()); }
  // Every rank's score (Note [Straggler score]); 0 before the first exchange.
  const std::vector<double>& scores() const { return scores_; }
  double score(int rank) const;
  // Mean delay, in ms, of the measured steps in the window in which `rank`
  // was late; 0 when it never was.
  double typical_delay_ms(int rank) const;
  // The ranks whose score is at or above the threshold, ascending.
  std::vector<int> stragglers() const;
  // Measured steps in the window (at most `window`).
  int64_t measured_steps() const { return int64_t(late_.size()); }
  const StragglerOptions& options() const { return options_; }

 private:
  void exchange();
  void push_step(const std::vector<double>& waits_s);  // into the window
  void rescore();                                      // scores, delays, log

  std::shared_ptr<dist::ProcessGroup> group_;
  StragglerOptions options_;
  Device device_;
  std::vector<double> pending_;  // this rank's waits since the last exchange
  uint64_t last_backwards_ = 0;  // Reducer::synchronised_backwards() at the last observe
  bool seen_reducer_ = false;
  // The window: per measured step, the late rank (-1: none) and its delay.
  std::deque<int> late_;
  std::deque<double> delay_s_;
  std::vector<double> scores_;
  std::vector<double> delays_ms_;
  std::vector<char> named_;  // whether the last log named the rank a straggler
};

}  // namespace ddp::parallel
