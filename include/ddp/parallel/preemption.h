#pragma once
// Preemption: a scheduler's SIGTERM (or Slurm's `--signal` SIGUSR1/SIGUSR2)
// to any rank makes every rank stop at one agreed step, where the training
// loop writes a checkpoint and exits 0 within the grace period.
//
//   parallel::PreemptionWatcher watcher(world.store, world.rank(), world.size());
//   for (int64_t step = start; step < steps; ) {
//     train_step(...);
//     ++step;
//     if (watcher.should_stop(step)) { save_checkpoint(step); return 0; }
//   }
//
// Note [Preemption signals]
// A signal can arrive wherever a rank is: in forward, in backward waiting on
// a bucket, in evaluation, waiting for a batch, in a checkpoint write. Users
// reported saves that never happened because the signal was only looked at
// between steps, or not by every rank. So the handler only records the
// signal, its number and its time, in lock-free atomics (async-signal-safe),
// and keeps no other state: the loop looks at the record at every step
// boundary (should_stop) and, cheaply, in any inner loop (signalled()).
// Handlers are installed with SA_RESTART, so system calls that restart do;
// those that never restart (poll, sleeps) return EINTR as with any signal,
// which the store client and libddp's file writers retry. A handler that was installed before
// (an application's, or the flight recorder's SIGUSR1 dump) still runs
// after ours; a default or ignore action is replaced, not run, since the
// default of these signals ends the process. Signal dispositions belong to
// the process, so one watcher may install handlers at a time: the record
// and the previous actions are the only process-wide state, and a second
// watcher raises ValueError rather than silently taking them over. The
// destructor restores the previous actions.
//
// Note [Agreeing on a stop step]
// Signals reach ranks at different times, and perhaps only some of them
// (a `kill` of one rank, a launcher on one node). At every step boundary
// each rank makes one `check` of the key <prefix>stop_at in the job's store.
// The first rank that has seen a signal, at boundary s (s steps completed),
// publishes stop_at = s + 2 with compare_set, so the first writer wins and
// every later writer adopts its value. Every rank returns true exactly at
// completed_steps == stop_at. Why nobody has passed stop_at before seeing
// the key: each step's gradient allreduce needs every rank, so a rank
// cannot finish step s + 1 before the publishing rank has started step
// s + 1, which it does only after publishing; every other rank therefore
// checks at boundary s + 1 at the latest with the key present. s + 1 would
// be enough under that strict lockstep; the second step is slack for loops
// whose boundary is not exactly behind a collective (a Work waited in the
// next step, should_stop called before the optimizer step), at the cost of
// one step of the grace period. If a rank nevertheless first sees stop_at
// behind it, the lockstep assumption failed (should_stop not called at
// every boundary, or ranks that are more than a step apart): that raises
// ddp::Error naming both steps instead of hanging the ranks that stop.
// A world of one has nobody to agree with and stops at the first boundary
// after the signal.

#include <chrono>
#include <csignal>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/dist/store.h"

namespace ddp::parallel {

namespace detail {
struct SignalRecord;  // the first signal and its time, in lock-free atomics
}

struct PreemptionOptions {
  // The signals that mean "preempted". Not SIGKILL or SIGSTOP (ValueError).
  std::vector<int> signals = {SIGTERM, SIGUSR1, SIGUSR2};
  // The time from the signal to the end of the checkpoint (>= 0); unset:
  // DDP_PREEMPT_GRACE_S (seconds, >= 0; ddprun sets it to its
  // --preempt-grace) or else 30 s.
  std::optional<std::chrono::milliseconds> grace;
  // Where the agreement lives in the store (Note [Agreeing on a stop step]).
  // Two watchers of one job that are alive one after the other need
  // different prefixes, as the key stays.
  std::string key_prefix = "ddp/preemption/";
  // false: no handlers; only notify() records signals (tests, or a program
  // that learns of preemption otherwise, such as a cloud's notice). Such
  // watchers may coexist with each other and with one that installs.
  bool install_handlers = true;
};

class PreemptionWatcher {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kDefaultGrace{30'000};

  // A world of one, without a store. ValueError for a bad option or when
  // another watcher already installs handlers in this process.
  explicit PreemptionWatcher(PreemptionOptions options = {});
  // One rank of a job of world_size ranks that share `store` (init_process_group's
  // World::store). ValueError as above, for a rank outside the world, or a
  // world of several ranks without a store.
  PreemptionWatcher(std::shared_ptr<dist::Store> store, int rank, int world_size,
                    PreemptionOptions options = {});
  // Restores the signal actions that were there before.
  ~PreemptionWatcher();
  PreemptionWatcher(const PreemptionWatcher&) = delete;
  PreemptionWatcher& operator=(const PreemptionWatcher&) = delete;

  // Whether this process has seen one of the signals. Cheap (one atomic
  // load), safe from any thread: for inner loops (evaluation, waiting for
  // data) to bail out early. It is local: peers may not have seen it yet,
  // so bail out only of work that issues no collective the peers still
  // expect.
  bool signalled() const;
  // At every step boundary, after `completed_steps` steps: whether to stop
  // (checkpoint and exit) now. Every rank of the job returns true at the
  // same step (Note [Agreeing on a stop step]). One store round trip per
  // call; one or two more the first time a stop is published or learnt.
  // Called by one thread (the training loop's). Raises ddp::Error when this
  // rank is already past the agreed step.
  bool should_stop(int64_t completed_steps);
  // Records `signal` as the handler does (the first one counts).
  void notify(int signal);

  // The first signal seen (0: none) and when.
  int signal_number() const;
  std::optional<Clock::time_point> signalled_at() const;
  // The agreed stop step, once should_stop has learnt it.
  std::optional<int64_t> stop_step() const { return stop_at_; }

  // The configured grace period; the deadline for the checkpoint: the signal
  // time plus the grace, or, on a rank that learnt of the stop only through
  // the store, the time it learnt it plus the grace (time_point::max()
  // while neither happened); the time left until it (zero when past, the
  // whole grace while nothing happened).
  std::chrono::milliseconds grace() const { return grace_; }
  Clock::time_point deadline() const;
  std::chrono::milliseconds grace_left() const;

  // A signal's name ("SIGTERM"), or "signal N".
  static std::string signal_name(int signal);

 private:
  void install();
  std::string key() const { return options_.key_prefix + "stop_at"; }
  void publish(int64_t completed_steps);
  void learn(const std::string& value);

  PreemptionOptions options_;
  std::shared_ptr<dist::Store> store_;
  int rank_ = 0, world_size_ = 1;
  std::chrono::milliseconds grace_;
  detail::SignalRecord* record_ = nullptr;            // the handlers', or own_record_
  std::unique_ptr<detail::SignalRecord> own_record_;  // without handlers
  bool installed_ = false;
  std::optional<int64_t> stop_at_;
  std::optional<Clock::time_point> learnt_at_;  // when stop_at_ was learnt
};

}  // namespace ddp::parallel
