#pragma once
// WorkerWatchdog: holds the deadline of the blocking MPI call that an mpi
// group's worker is in, since the worker itself cannot stop waiting (Note
// [MPI progress] and Note [MPI timeouts] in process_group_mpi.cpp). Built
// only with MPI; it makes no MPI call itself.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "ddp/dist/work.h"

namespace ddp::dist::detail {

class WorkerWatchdog {
 public:
  // Runs on the watchdog's thread when a call outlives its deadline, while
  // the worker is still in it: breaks the group (the desync report) and
  // returns the group's error.
  using OnTimeout = std::function<std::exception_ptr(const char* op, std::chrono::milliseconds)>;

  explicit WorkerWatchdog(OnTimeout on_timeout);
  ~WorkerWatchdog();  // stop()
  WorkerWatchdog(const WorkerWatchdog&) = delete;
  WorkerWatchdog& operator=(const WorkerWatchdog&) = delete;

  // ---- on the worker, around each blocking call (atomics only) ------------
  // timeout 0: no deadline.
  void begin(const char* op, std::chrono::milliseconds timeout);
  // nullptr: the call ended in time. Else the watchdog took the call when
  // its deadline passed: waits until on_timeout has returned, and returns
  // its error.
  std::exception_ptr end();

  // ---- Works ---------------------------------------------------------------
  // Every Work of the group, as it is issued. When the worker is still in
  // its call after on_timeout returned, it is given up: every tracked Work
  // not yet completed fails with the group's error (the worker would never
  // reach them), and so does every Work tracked later, at once.
  void track(const WorkPtr& work);
  // Whether the worker was given up (it may still return from MPI one day:
  // it must then touch no Work, and the group must never join it).
  bool gave_up() const;

  // Waits for an on_timeout in progress, then ends the thread. Idempotent.
  void stop();

 private:
  void loop();

  // word_: (call number << 2) | kInCall | kTaken.
  static constexpr uint64_t kInCall = 1, kTaken = 2;
  std::atomic<uint64_t> word_{0};
  std::atomic<int64_t> deadline_{0};  // steady_clock ticks
  std::atomic<const char*> op_{""};
  std::atomic<int64_t> timeout_ms_{0};
  uint64_t calls_ = 0;    // worker only
  bool in_call_ = false;  // worker only: begin() armed a deadline

  OnTimeout on_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // wakes the thread (stop), and end() (error_)
  bool stop_ = false;
  bool fired_ = false;        // on_timeout has returned
  std::exception_ptr error_;  // what it returned
  bool worker_back_ = false;  // the worker returned from the call that was taken
  bool gave_up_ = false;
  std::atomic<bool> gave_up_flag_{false};   // gave_up_, read without the mutex
  std::vector<std::weak_ptr<Work>> works_;  // tracked, maybe not completed yet
  size_t prune_at_ = 64;                    // forget completed ones at this size
  std::thread thread_;
};

}  // namespace ddp::dist::detail
