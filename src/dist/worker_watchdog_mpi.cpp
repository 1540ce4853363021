// See worker_watchdog_mpi.h and Note [MPI timeouts] in process_group_mpi.cpp.

#include "worker_watchdog_mpi.h"

#include <algorithm>

namespace ddp::dist::detail {

namespace {

using Clock = std::chrono::steady_clock;

// How often the watchdog looks at the worker, unless the deadline of the
// call in flight comes sooner: a deadline is noticed at most this late. It
// never sleeps longer, since the next call may have an earlier deadline
// (set_timeout() shortened it); ten wake-ups a second cost nothing.
constexpr std::chrono::milliseconds kPeriod{100};

}  // namespace

WorkerWatchdog::WorkerWatchdog(OnTimeout on_timeout) : on_timeout_(std::move(on_timeout)) {
  thread_ = std::thread([this] { loop(); });
}

WorkerWatchdog::~WorkerWatchdog() { stop(); }

void WorkerWatchdog::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WorkerWatchdog::begin(const char* op, std::chrono::milliseconds timeout) {
  in_call_ = timeout.count() > 0;
  if (!in_call_) return;
  ++calls_;
  deadline_.store((Clock::now() + timeout).time_since_epoch().count(), std::memory_order_relaxed);
  op_.store(op, std::memory_order_relaxed);
  timeout_ms_.store(timeout.count(), std::memory_order_relaxed);
  word_.store(calls_ << 2 | kInCall, std::memory_order_release);
}

std::exception_ptr WorkerWatchdog::end() {
  if (!in_call_) return nullptr;
  in_call_ = false;
  uint64_t expected = calls_ << 2 | kInCall;
  if (word_.compare_exchange_strong(expected, calls_ << 2, std::memory_order_acq_rel))
    return nullptr;
  // Taken: wait for the report the watchdog is making.
  std::unique_lock<std::mutex> lk(mu_);
  worker_back_ = true;
  cv_.wait(lk, [&] { return fired_; });
  return error_;
}

void WorkerWatchdog::track(const WorkPtr& work) {
  std::unique_lock<std::mutex> lk(mu_);
  if (gave_up_) {
    const std::exception_ptr err = error_;
    lk.unlock();
    work->mark_completed(err);
    return;
  }
  // Forget the completed ones now and then: when the list has doubled since
  // (so each Work is looked at O(1) times on average).
  if (works_.size() >= prune_at_) {
    std::erase_if(works_, [](const std::weak_ptr<Work>& w) {
      const WorkPtr p = w.lock();
      return !p || p->is_completed();
    });
    prune_at_ = std::max<size_t>(64, 2 * works_.size());
  }
  works_.push_back(work);
}

bool WorkerWatchdog::gave_up() const { return gave_up_flag_.load(std::memory_order_acquire); }

void WorkerWatchdog::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    uint64_t word = word_.load(std::memory_order_acquire);
    const Clock::time_point now = Clock::now();
    if (!(word & kInCall)) {
      cv_.wait_until(lk, now + kPeriod);
      continue;
    }
    const Clock::time_point deadline{Clock::duration(deadline_.load(std::memory_order_relaxed))};
    if (now < deadline) {
      cv_.wait_until(lk, std::min(deadline, now + kPeriod));
      continue;
    }
    // The deadline passed: take the call unless it ended (or another began).
    if (!word_.compare_exchange_strong(word, word | kTaken, std::memory_order_acq_rel)) continue;
    const char* op = op_.load(std::memory_order_relaxed);
    const std::chrono::milliseconds timeout(timeout_ms_.load(std::memory_order_relaxed));
    lk.unlock();
    std::exception_ptr err = on_timeout_(op, timeout);
    std::vector<WorkPtr> to_fail;
    lk.lock();
    error_ = err;
    fired_ = true;
    if (!worker_back_) {
      // Still in MPI after the whole report: the Works it holds and those
      // queued behind it fail here.
      gave_up_ = true;
      gave_up_flag_.store(true, std::memory_order_release);
      for (const std::weak_ptr<Work>& w : works_)
        if (WorkPtr p = w.lock(); p && !p->is_completed()) to_fail.push_back(std::move(p));
      works_.clear();
    }
    lk.unlock();
    cv_.notify_all();
    for (const WorkPtr& w : to_fail) w->mark_completed(err);
    return;  // one timeout per group: it is broken now
  }
}

}  // namespace ddp::dist::detail
