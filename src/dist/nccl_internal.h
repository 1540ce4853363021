#pragma once
// Internal to the nccl backend: the group's state (ProcessGroupNCCL::Impl)
// and its Work, shared by process_group_nccl.cpp (creation, the
// collectives) and watchdog_nccl.cpp (completion, timeouts, abort).
// Needs the CUDA runtime and NCCL headers: included by *_nccl.cpp files only.

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/dist/process_group_nccl.h"
#include "ddp/dist/work.h"
#include "ddp/tensor/cuda.h"

namespace ddp::dist {

using NcclClock = std::chrono::steady_clock;

// An exception_ptr holding E with the usual "message (file.cpp:123)" text,
// for failing Works from another thread.
template <class E>
std::exception_ptr make_error_ptr(const char* file, int line, const std::string& msg) {
  try {
    ::ddp::detail::throw_error<E>(file, line, msg);
  } catch (...) {
    return std::current_exception();
  }
}
#define DDP_NCCL_ERROR_PTR(ErrorType, ...) \
  ::ddp::dist::make_error_ptr<::ddp::ErrorType>(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

// The Work of one NCCL operation. Its end event is recorded on the group's
// communication stream after the operation; see Note [NCCL stream ordering]
// (process_group_nccl.cpp) for wait() and Note [NCCL watchdog]
// (watchdog_nccl.cpp) for completion. Independent of the group, so a
// Work may outlive it.
class WorkNCCL : public Work {
 public:
  // blocking: wait() also blocks the host (blocking_wait, barrier).
  WorkNCCL(const std::string& op, int64_t seq, int rank, int size, int device, bool blocking,
           std::chrono::milliseconds timeout);
  ~WorkNCCL() override;  // logs, never throws

  // Orders the caller's current stream after the operation; with blocking,
  // also waits on the host until it has finished, up to `timeout` (zero: the
  // operation's own timeout). Rethrows the operation's error.
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) override;

  // ---- for the group and its watchdog ---------------------------------------
  cudaEvent_t end_event() const { return end_; }
  // Completes the Work if its end event has passed (or CUDA reports an error
  // for it). True when the Work is complete, or being completed by another
  // thread (is_completed() may lag by moments).
  bool poll();
  // Completes the Work exactly once, whoever comes first: the watchdog, a
  // blocking waiter, or an abort. Drops the tensors kept alive.
  void finish(std::exception_ptr error);
  bool timed_out(NcclClock::time_point now) const {
    return timeout_.count() > 0 && now - start_ > timeout_;
  }
  double elapsed_s(NcclClock::time_point now) const {
    return std::chrono::duration<double>(now - start_).count();
  }
  double timeout_s() const { return timeout_.count() / 1000.0; }
  // "allreduce #3 (nccl rank 0/2)", the head of every message about it.
  std::string label() const;
  // Holds tensors until the Work completes (besides record_stream, see Note
  // [NCCL stream ordering]).
  void keep_alive(Tensors ts);

 private:
  const int64_t seq_;
  const int rank_, size_, device_;
  const bool blocking_;
  const std::chrono::milliseconds timeout_;
  const NcclClock::time_point start_;
  cudaEvent_t end_ = nullptr;
  std::atomic<bool> claimed_{false};
  std::mutex keep_mu_;
  Tensors keep_;
};

// Note [NCCL non-blocking communicators]
// The communicator is created with ncclConfig_t::blocking = 0 (unless the
// user set NCCL_COMM_BLOCKING, which we leave to NCCL), so no NCCL call can
// block the calling thread indefinitely on a peer: a call that cannot finish
// at once returns ncclInProgress, and we poll ncclCommGetAsyncError until it
// says ncclSuccess (the operation is then enqueued on the stream) or an
// error, up to the group's timeout. This is what lets a dead peer surface as
// an error instead of a hang during creation and connection setup, and what
// lets the watchdog take the communicator away for the abort while no other
// thread is inside NCCL with it (both hold comm_mu).
struct ProcessGroupNCCL::Impl {
  int rank = 0;
  int size = 1;
  int device = 0;
  std::string name;
  bool blocking_wait = false;
  AsyncErrorHandling async_error_handling = AsyncErrorHandling::raise;
  cuda::Stream stream;                // the communication stream (owned)
  cudaEvent_t start_event = nullptr;  // reused hand-over event: current stream -> comm stream

  // comm_mu guards the communicator: every NCCL call on it, and taking it
  // away for the abort (ncclCommAbort itself then runs unlocked).
  mutable std::mutex comm_mu;
  ncclComm_t comm = nullptr;  // null once aborted
  std::string abort_reason;   // why it was aborted; set once with `aborted`
  std::atomic<bool> aborted{false};
  int64_t next_seq = 0;
  // Set when ncclCommAbort runs on its own thread (Note [NCCL watchdog]).
  struct AbortDone {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  std::shared_ptr<AbortDone> abort_done;  // guarded by comm_mu

  // mu guards the watchdog's state.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<WorkNCCL>> outstanding;
  bool stop = false;
  std::thread watchdog;
  // The group's (Note [Flight recorder]); abort() names this rank's position
  // and dumps it. Set by the constructor, outlives the watchdog.
  const FlightRecorder* recorder = nullptr;

  ~Impl();  // frees the stream and the event; the communicator is gone by then

  // "nccl rank 0/2" (with the group's name when it is not "nccl").
  std::string who() const;
  // comm_mu held: polls ncclCommGetAsyncError until the communicator is no
  // longer ncclInProgress. Raises NcclError on an error, TimeoutError past
  // the deadline (Note [NCCL non-blocking communicators]).
  void wait_ready(const std::string& context, NcclClock::time_point deadline);

  // ---- watchdog_nccl.cpp ---------------------------------------------------
  void start_watchdog();
  // Lets the watchdog finish the outstanding Works (each up to its timeout),
  // then joins it. Never throws.
  void drain_and_stop_watchdog();
  void track(std::shared_ptr<WorkNCCL> work);
  // Aborts the communicator once and fails every outstanding Work with
  // TimeoutError (timeout) or NcclError, each message naming the Work, the
  // rank, the time it had been running and `cause`. See Note [NCCL watchdog].
  void abort(bool timeout, const std::string& cause);
  // Waits up to `limit` for an ncclCommAbort started by abort() or
  // free_communicator() to return; logs when it does not. Never throws.
  void wait_for_abort(std::chrono::milliseconds limit);
  // Frees the communicator at shutdown: ncclCommFinalize, then
  // ncclCommDestroy, or ncclCommAbort when finalizing fails or takes longer
  // than min(timeout, 60 s). Never throws. See Note [NCCL shutdown].
  void free_communicator(std::chrono::milliseconds timeout);
  // Ends the process after an abort when async_error_handling says so (Note
  // [Async error handling]). Watchdog thread only.
  void tear_down_if_asked();

 private:
  void watchdog_loop();
};

}  // namespace ddp::dist
