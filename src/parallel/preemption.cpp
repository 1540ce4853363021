// Preemption: the signal handlers, their record, and the agreement on one
// stop step through the job's store. See the Notes in preemption.h.

#include "ddp/parallel/preemption.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "ddp/core/env.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"

namespace ddp::parallel {

namespace detail {
// Written by the signal handler: only lock-free atomics (Note [Preemption
// signals]). at_ns is set before signal, so a reader that sees the signal
// also sees its time.
struct SignalRecord {
  std::atomic<int64_t> at_ns{0};  // steady_clock, since its epoch; 0: none
  std::atomic<int> signal{0};     // 0: none
};
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "the preemption signal handler needs lock-free atomics");
}  // namespace detail

namespace {

using Clock = PreemptionWatcher::Clock;
using std::chrono::milliseconds;

// The process-wide state of Note [Preemption signals]: signal dispositions
// are the process's, so is what the handlers write and what they replaced.
detail::SignalRecord g_record;
std::atomic<bool> g_installed{false};
struct sigaction g_previous[NSIG];

// steady_clock::now() is clock_gettime, which is async-signal-safe.
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// The first signal wins, with its time.
void record_signal(detail::SignalRecord& r, int sig) {
  int64_t no_time = 0;
  r.at_ns.compare_exchange_strong(no_time, now_ns());
  int no_signal = 0;
  r.signal.compare_exchange_strong(no_signal, sig);
}

// Records the signal, then runs the handler that was there before, if it
// was a function (Note [Preemption signals]).
extern "C" void on_preemption_signal(int sig, siginfo_t* info, void* context) {
  const int saved = errno;
  record_signal(g_record, sig);
  const struct sigaction& prev = g_previous[sig];
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler) {
    prev.sa_handler(sig);
  }
  errno = saved;
}

void check_signals(const std::vector<int>& signals) {
  DDP_CHECK(!signals.empty(), "PreemptionWatcher: no signals to watch");
  for (int s : signals) {
    DDP_CHECK(s > 0 && s < NSIG && s != SIGKILL && s != SIGSTOP,
              "PreemptionWatcher: cannot watch {} (a signal from 1 to {}, not SIGKILL or SIGSTOP)",
              PreemptionWatcher::signal_name(s), NSIG - 1);
    DDP_CHECK(std::count(signals.begin(), signals.end(), s) == 1,
              "PreemptionWatcher: {} is named twice in the signals",
              PreemptionWatcher::signal_name(s));
  }
}

// Far enough for any job, near enough that a deadline cannot overflow.
constexpr int64_t kMaxGraceMs = int64_t(1e12);

milliseconds resolve_grace(const std::optional<milliseconds>& grace) {
  if (grace) {
    DDP_CHECK(grace->count() >= 0 && grace->count() < kMaxGraceMs,
              "PreemptionWatcher: grace period of {} ms must be >= 0 (and below 10^9 s)",
              grace->count());
    return *grace;
  }
  const double s =
      env_double("DDP_PREEMPT_GRACE_S", 0.001 * double(PreemptionWatcher::kDefaultGrace.count()));
  DDP_CHECK(std::isfinite(s) && s >= 0 && s * 1000 < double(kMaxGraceMs),
            "DDP_PREEMPT_GRACE_S={}: the grace period must be a number of seconds >= 0", s);
  return milliseconds(int64_t(std::llround(s * 1000)));
}

// Puts back the previous actions of signals[0..n).
void restore_actions(const std::vector<int>& signals, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (::sigaction(signals[i], &g_previous[signals[i]], nullptr) != 0)
      DDP_LOG_ERROR("PreemptionWatcher: cannot restore the action of {}: {}",
                    PreemptionWatcher::signal_name(signals[i]), std::strerror(errno));
}

// The stored agreement: "<stop_at> <rank> <signal> <step>", the rank that
// published it, the signal it saw and the boundary where it saw it.
struct StopRecord {
  int64_t stop_at = 0, step = 0;
  int rank = 0, signal = 0;
};

std::string encode(const StopRecord& r) {
  return fmt::format("{} {} {} {}", r.stop_at, r.rank, r.signal, r.step);
}

std::optional<StopRecord> decode(const std::string& value) {
  StopRecord r;
  char tail = 0;
  if (std::sscanf(value.c_str(), "%" SCNd64 " %d %d %" SCNd64 "%c", &r.stop_at, &r.rank, &r.signal,
                  &r.step, &tail) != 4)
    return std::nullopt;
  return r;
}

}  // namespace

std::string PreemptionWatcher::signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGKILL:
      return "SIGKILL";
    case SIGSTOP:
      return "SIGSTOP";
    case SIGCONT:
      return "SIGCONT";
    default:
      return fmt::format("signal {}", signal);
  }
}

PreemptionWatcher::PreemptionWatcher(PreemptionOptions options)
    : PreemptionWatcher(nullptr, 0, 1, std::move(options)) {}

PreemptionWatcher::PreemptionWatcher(std::shared_ptr<dist::Store> store, int rank, int world_size,
                                     PreemptionOptions options)
    : options_(std::move(options)),
      store_(std::move(store)),
      rank_(rank),
      world_size_(world_size),
      grace_(resolve_grace(options_.grace)) {
  DDP_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
            "PreemptionWatcher: rank {} is outside a world of {}", rank, world_size);
  DDP_CHECK(store_ || world_size == 1,
            "PreemptionWatcher: a world of {} ranks needs the job's store to agree on a stop "
            "step (init_process_group's World::store; an mpi job launched without MASTER_ADDR "
            "has none)",
            world_size);
  if (options_.install_handlers) {
    install();
  } else {
    own_record_ = std::make_unique<detail::SignalRecord>();
    record_ = own_record_.get();
  }
}

void PreemptionWatcher::install() {
  check_signals(options_.signals);
  bool none = false;
  DDP_CHECK(g_installed.compare_exchange_strong(none, true),
            "PreemptionWatcher: another watcher already handles the preemption signals of this "
            "process; signal handlers belong to the process, so keep one watcher alive at a "
            "time (or pass install_handlers = false and call notify())");
  g_record.at_ns.store(0);
  g_record.signal.store(0);
  record_ = &g_record;
  struct sigaction sa {};
  sa.sa_sigaction = on_preemption_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  const std::vector<int>& signals = options_.signals;
  for (size_t i = 0; i < signals.size(); ++i) {
    // The previous action is read first, so the handler never runs without it.
    if (::sigaction(signals[i], nullptr, &g_previous[signals[i]]) != 0 ||
        ::sigaction(signals[i], &sa, nullptr) != 0) {
      const int err = errno;
      restore_actions(signals, i);
      g_installed.store(false);
      DDP_THROW(Error, "PreemptionWatcher: cannot install a handler for {}: {}",
                signal_name(signals[i]), std::strerror(err));
    }
  }
  installed_ = true;
}

PreemptionWatcher::~PreemptionWatcher() {
  if (!installed_) return;
  restore_actions(options_.signals, options_.signals.size());
  g_installed.store(false);
}

bool PreemptionWatcher::signalled() const {
  return record_->signal.load(std::memory_order_acquire) != 0;
}

int PreemptionWatcher::signal_number() const { return record_->signal.load(); }

std::optional<Clock::time_point> PreemptionWatcher::signalled_at() const {
  if (!signalled()) return std::nullopt;
  return Clock::time_point(std::chrono::nanoseconds(record_->at_ns.load()));
}

void PreemptionWatcher::notify(int signal) {
  DDP_CHECK(signal > 0, "PreemptionWatcher::notify: signal {} must be > 0", signal);
  record_signal(*record_, signal);
}

Clock::time_point PreemptionWatcher::deadline() const {
  if (auto at = signalled_at()) return *at + grace_;
  if (learnt_at_) return *learnt_at_ + grace_;
  return Clock::time_point::max();
}

milliseconds PreemptionWatcher::grace_left() const {
  const Clock::time_point end = deadline();
  if (end == Clock::time_point::max()) return grace_;
  return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(end - Clock::now()));
}

// Note [Agreeing on a stop step]: the first writer wins; everybody,
// ourselves included, adopts what the store holds afterwards.
void PreemptionWatcher::publish(int64_t completed_steps) {
  const int64_t delay = world_size_ > 1 ? 2 : 0;
  const StopRecord mine{completed_steps + delay, completed_steps, rank_, signal_number()};
  if (!store_) {
    learn(encode(mine));
    return;
  }
  learn(store_->compare_set(key(), "", encode(mine)));
}

void PreemptionWatcher::learn(const std::string& value) {
  const std::optional<StopRecord> r = decode(value);
  DDP_CHECK_T(Error, r.has_value(),
              "PreemptionWatcher: the store's key '{}' holds '{}', not a stop step (another "
              "program uses the prefix '{}'?)",
              key(), value, options_.key_prefix);
  stop_at_ = r->stop_at;
  learnt_at_ = Clock::now();
  const std::string what = fmt::format(
      "preemption: rank {} stops after step {} ({} on rank {} after step {}; grace {:.1f} s)",
      rank_, r->stop_at, signal_name(r->signal), r->rank, r->step, 0.001 * double(grace_.count()));
  if (rank_ == 0 || r->rank == rank_)
    DDP_LOG_WARNING("{}", what);
  else
    DDP_LOG_INFO("{}", what);
}

bool PreemptionWatcher::should_stop(int64_t completed_steps) {
  DDP_CHECK(completed_steps >= 0,
            "PreemptionWatcher::should_stop: {} completed steps (must be >= 0)", completed_steps);
  if (!stop_at_) {
    if (signalled())
      publish(completed_steps);
    else if (store_ && store_->check({key()}))
      learn(store_->get_string(key()));
  }
  if (!stop_at_) return false;
  // Note [Agreeing on a stop step]: behind the agreed step is a broken
  // lockstep, and stopping late would leave the others waiting forever.
  DDP_CHECK_T(Error, completed_steps <= *stop_at_,
              "PreemptionWatcher: rank {} has completed {} steps, but the ranks agreed to stop "
              "after step {}; should_stop must be called at every step boundary (and the loop "
              "must end when it returns true), with ranks at most one step apart",
              rank_, completed_steps, *stop_at_);
  return completed_steps == *stop_at_;
}

}  // namespace ddp::parallel
