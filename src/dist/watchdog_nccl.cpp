// The nccl backend's watchdog, Work completion, abort and shutdown. Built
// only when NCCL is found. See process_group_nccl.cpp for the rest.
//
// Note [NCCL watchdog]
// NCCL kernels wait on the GPU for their peers, so a dead, stuck or
// desynchronised peer shows up as a collective that never ends, never as an
// error. Each group therefore runs one watchdog thread. While operations are
// outstanding it polls, backing off from 100 us to 2 ms:
//  - ncclCommGetAsyncError: an asynchronous NCCL error (a remote peer gone,
//    a network failure) aborts the group with NcclError;
//  - each outstanding Work's end event: a passed event completes the Work
//    (so is_completed() lags the GPU by at most one polling interval);
//  - each Work's age: one older than the group's timeout (measured from its
//    enqueue, so time spent waiting for the caller's stream counts) aborts the
//    group with TimeoutError.
// When idle it sleeps until the next operation, still checking for
// asynchronous errors once a second. Aborting (Impl::abort, also used when
// enqueuing fails) first marks the group aborted, so later operations raise
// NcclError at once, then fails every outstanding Work with an error naming
// its op, sequence number, rank and elapsed time and the cause, and only then
// aborts the communicator, on a short-lived detached thread of its own:
// ncclCommAbort is an intra-node collective in NCCL and can wait for a local
// peer that died, so neither the watchdog nor the caller may wait for it (the
// thread owns nothing but the communicator handle; the communication stream
// is destroyed lazily by CUDA). The destructor waits for it at most 60 s, so
// that a normal exit does not tear CUDA down under it. Every rank runs its own
// watchdog with the same timeout, so a hang raises on every rank rather than
// on the one that noticed first; the application is expected to exit (or
// restart from a checkpoint under ddprun) rather than reuse the group. The
// timeout is the group's ProcessGroup::timeout(), read when each operation is
// enqueued.
//
// Note [NCCL shutdown]
// The destructor lets the watchdog finish the outstanding Works (each still
// bounded by its own timeout), then frees the communicator with
// ncclCommFinalize (which flushes operations NCCL's proxy thread may still be
// sending for us) followed by ncclCommDestroy. Finalizing is polled on the
// non-blocking communicator for at most min(timeout, 60 s); if it fails or
// takes longer (a peer gone), the communicator is aborted as above, waiting
// at most another 60 s for ncclCommAbort: a destructor never hangs on another
// rank. An aborted group has nothing left to free but that wait.

//
// Note [Async error handling]
// NCCL fails on the GPU, long after the host queued the collective; Work::wait()
// only orders the caller's stream and returns. Whatever a failed collective
// left in its tensors would then be consumed by later kernels (the
// optimizer step) and could reach a checkpoint. Two defences, as in torch:
//  - the DDP engine checks every bucket's Work on the host at the end of
//    backward and raises the first error it finds (Note [Bucket errors] in
//    src/parallel/reducer.cpp), so a failure the watchdog has seen never
//    lets a step through;
//  - with AsyncErrorHandling::tear_down (DDP_ASYNC_ERROR_HANDLING=1, torch's
//    TORCH_NCCL_ASYNC_ERROR_HANDLING=1) the watchdog, after failing the Works
//    and starting the abort, waits up to 10 s for ncclCommAbort, logs what
//    failed and ends the process with std::abort(): a rank whose
//    communicator failed never hangs in a later host synchronisation nor
//    steps on garbage, and its launcher tears the job down (ddprun can
//    restart it from the last good checkpoint). The default, raise, leaves
//    the process to the application: every later collective raises.

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "core/cuda_check.h"
#include "ddp/core/logging.h"
#include "dist/nccl_check.h"
#include "dist/nccl_internal.h"
#include "tensor/cuda_event_pool.h"

namespace ddp::dist {

namespace {

constexpr auto kMinPoll = std::chrono::microseconds(100);
constexpr auto kMaxPoll = std::chrono::microseconds(2000);
constexpr auto kIdleCheck = std::chrono::seconds(1);
constexpr auto kMaxFinalize = std::chrono::milliseconds(60'000);

// An asynchronous error of the communicator, as text; "" when there is none
// (or the communicator is gone).
std::string async_error(ProcessGroupNCCL::Impl& p) {
  std::lock_guard<std::mutex> lk(p.comm_mu);
  if (!p.comm) return "";
  ncclResult_t state = ncclSuccess;
  ncclResult_t rc = ncclCommGetAsyncError(p.comm, &state);
  if (rc != ncclSuccess) state = rc;
  if (state == ncclSuccess || state == ncclInProgress) return "";
  return fmt::format("NCCL reported an asynchronous error: {}",
                     detail::nccl_error_text(state, p.comm));
}

// ncclCommAbort on a detached thread that owns the handle (Note [NCCL
// watchdog]); synchronously if no thread can be started. The returned state
// says when it has returned.
std::shared_ptr<ProcessGroupNCCL::Impl::AbortDone> abort_detached(ncclComm_t comm, int device,
                                                                  const std::string& who) {
  auto done = std::make_shared<ProcessGroupNCCL::Impl::AbortDone>();
  auto run = [comm, device, who, done] {
    if (cudaSetDevice(device) != cudaSuccess) (void)cudaGetLastError();
    // No handle for ncclGetLastError: the communicator is gone afterwards.
    DDP_NCCL_WARN(who, nullptr, ncclCommAbort(comm));
    DDP_LOG_INFO("{}: communicator aborted", who);
    {
      std::lock_guard<std::mutex> lk(done->mu);
      done->done = true;
    }
    done->cv.notify_all();
  };
  try {
    std::thread(run).detach();
  } catch (const std::exception& e) {
    DDP_LOG_WARNING("{}: no thread for ncclCommAbort ({}); aborting here", who, e.what());
    run();
  }
  return done;
}

}  // namespace

// ---- WorkNCCL ------------------------------------------------------------------------

WorkNCCL::WorkNCCL(const std::string& op, int64_t seq, int rank, int size, int device,
                   bool blocking, std::chrono::milliseconds timeout)
    : Work(op),
      seq_(seq),
      rank_(rank),
      size_(size),
      device_(device),
      blocking_(blocking),
      timeout_(timeout),
      start_(NcclClock::now()),
      end_(static_cast<cudaEvent_t>(acquire_cuda_event(device))) {}

WorkNCCL::~WorkNCCL() {
  // A wait already queued on a stream keeps the recorded state, so the event
  // may go back to the pool even if the GPU has not reached it yet.
  try {
    release_cuda_event(device_, end_);
  } catch (const std::exception& e) {
    DDP_LOG_WARNING("{}: releasing the end event: {}", label(), e.what());
  }
}

std::string WorkNCCL::label() const {
  return fmt::format("{} #{} (nccl rank {}/{})", op(), seq_, rank_, size_);
}

void WorkNCCL::keep_alive(Tensors ts) {
  std::lock_guard<std::mutex> lk(keep_mu_);
  if (!claimed_.load()) keep_ = std::move(ts);
}

void WorkNCCL::finish(std::exception_ptr error) {
  if (claimed_.exchange(true)) return;
  Tensors drop;
  {
    std::lock_guard<std::mutex> lk(keep_mu_);
    drop.swap(keep_);
  }
  mark_completed(error);
}

bool WorkNCCL::poll() {
  if (is_completed()) return true;
  cudaError_t err = cudaEventQuery(end_);
  if (err == cudaErrorNotReady) return false;
  if (err == cudaSuccess) {
    finish(nullptr);
  } else {
    (void)cudaGetLastError();
    finish(DDP_NCCL_ERROR_PTR(CudaError, "{}: failed on the GPU: {}: {}", label(),
                              cudaGetErrorName(err), cudaGetErrorString(err)));
  }
  return true;
}

// ---- the group's state ------------------------------------------------------------------

ProcessGroupNCCL::Impl::~Impl() {
  if (comm) {  // creation failed half way
    DDP_NCCL_WARN(who(), nullptr, ncclCommAbort(comm));
    comm = nullptr;
  }
  if (start_event) DDP_CUDA_WARN(cudaEventDestroy(start_event));
  try {
    stream.destroy();
  } catch (const std::exception& e) {
    DDP_LOG_WARNING("{}: destroying the communication stream: {}", who(), e.what());
  }
}

void ProcessGroupNCCL::Impl::start_watchdog() {
  watchdog = std::thread([this] { watchdog_loop(); });
}

void ProcessGroupNCCL::Impl::drain_and_stop_watchdog() {
  {
    std::lock_guard<std::mutex> lk(mu);
    stop = true;
  }
  cv.notify_all();
  if (watchdog.joinable()) watchdog.join();
}

void ProcessGroupNCCL::Impl::track(std::shared_ptr<WorkNCCL> work) {
  {
    std::lock_guard<std::mutex> lk(mu);
    outstanding.push_back(std::move(work));
  }
  cv.notify_all();
}

void ProcessGroupNCCL::Impl::abort(bool timeout, const std::string& given_cause) {
  // Note [Desync report]: this rank's position and its dump. (The exchange
  // of positions between ranks, as gloo and mpi do, is not wired for nccl:
  // the group keeps no store after its creation.)
  std::string cause = given_cause;
  if (recorder && !aborted.load()) {
    cause += "; this rank is at " + recorder->position();
    const std::string path = recorder->dump_to_file(given_cause);
    if (!path.empty()) cause += "; flight recorder dumped to " + path;
  }
  ncclComm_t victim = nullptr;
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    if (aborted.load()) return;
    abort_reason = cause;
    aborted.store(true);
    victim = comm;
    comm = nullptr;
  }
  DDP_LOG_ERROR("{}: {}; aborting the NCCL communicator", who(), cause);
  std::vector<std::shared_ptr<WorkNCCL>> works;
  {
    std::lock_guard<std::mutex> lk(mu);
    works = outstanding;
  }
  const auto now = NcclClock::now();
  for (auto& w : works) {
    if (w->poll()) continue;  // finished after all
    const std::string msg = fmt::format(
        "{}: aborted after {:.1f} s because {}; the NCCL communicator was aborted and this "
        "process group cannot be used any more",
        w->label(), w->elapsed_s(now), cause);
    w->finish(timeout ? DDP_NCCL_ERROR_PTR(TimeoutError, "{}", msg)
                      : DDP_NCCL_ERROR_PTR(NcclError, "{}", msg));
  }
  if (victim) {
    auto done = abort_detached(victim, device, who());
    std::lock_guard<std::mutex> lk(comm_mu);
    abort_done = std::move(done);
  }
}

void ProcessGroupNCCL::Impl::tear_down_if_asked() {
  if (async_error_handling != AsyncErrorHandling::tear_down || !aborted.load()) return;
  std::string reason;
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    reason = abort_reason;
  }
  wait_for_abort(std::chrono::seconds(10));
  DDP_LOG_ERROR(
      "{}: a collective failed ({}); DDP_ASYNC_ERROR_HANDLING=1 (tear_down): ending the process "
      "so that no step runs on what the aborted collective left behind",
      who(), reason);
  std::abort();
}

void ProcessGroupNCCL::Impl::wait_for_abort(std::chrono::milliseconds limit) {
  std::shared_ptr<AbortDone> done;
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    done = abort_done;
  }
  if (!done) return;
  std::unique_lock<std::mutex> lk(done->mu);
  if (!done->cv.wait_for(lk, limit, [&] { return done->done; }))
    DDP_LOG_WARNING("{}: ncclCommAbort has not returned after {:.1f} s; not waiting any longer",
                    who(), limit.count() / 1000.0);
}

void ProcessGroupNCCL::Impl::free_communicator(std::chrono::milliseconds timeout) {
  ncclComm_t c = nullptr;
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    c = comm;
    comm = nullptr;
  }
  if (!c) return;  // aborted earlier
  const std::string ctx = fmt::format("~ProcessGroupNCCL ({})", who());
  const auto limit = timeout.count() > 0 ? std::min(timeout, kMaxFinalize) : kMaxFinalize;
  const auto deadline = NcclClock::now() + limit;
  bool clean = true;
  ncclResult_t rc = ncclCommFinalize(c);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    DDP_LOG_WARNING("{}: ncclCommFinalize failed: {}", ctx, detail::nccl_error_text(rc, c));
    clean = false;
  }
  auto backoff = std::chrono::microseconds(10);
  while (clean) {
    ncclResult_t state = ncclSuccess;
    rc = ncclCommGetAsyncError(c, &state);
    if (rc != ncclSuccess) state = rc;
    if (state == ncclSuccess) break;
    if (state != ncclInProgress) {
      DDP_LOG_WARNING("{}: finalizing the communicator failed: {}", ctx,
                      detail::nccl_error_text(state, c));
      clean = false;
    } else if (NcclClock::now() > deadline) {
      DDP_LOG_WARNING("{}: finalizing the communicator took longer than {:.1f} s (a peer gone?)",
                      ctx, limit.count() / 1000.0);
      clean = false;
    } else {
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(10'000));
    }
  }
  if (clean) {
    DDP_NCCL_WARN(ctx, nullptr, ncclCommDestroy(c));
    return;
  }
  auto done = abort_detached(c, device, who());
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    abort_done = std::move(done);
  }
  wait_for_abort(kMaxFinalize);
}

// ---- the watchdog thread (Note [NCCL watchdog]) -----------------------------------------

namespace {

// One look at the group: asynchronous errors, finished Works, timeouts.
// True when something changed.
bool sweep(ProcessGroupNCCL::Impl& p, const std::vector<std::shared_ptr<WorkNCCL>>& works) {
  std::string error = async_error(p);
  if (!error.empty()) {
    p.abort(false, error);
    return true;
  }
  bool progressed = false;
  const auto now = NcclClock::now();
  for (const auto& w : works) {
    if (w->poll()) {
      progressed = true;
    } else if (w->timed_out(now)) {
      p.abort(true, fmt::format("{} timed out after {:.1f} s (timeout {:.1f} s)", w->label(),
                                w->elapsed_s(now), w->timeout_s()));
      return true;
    }
  }
  return progressed;
}

}  // namespace

void ProcessGroupNCCL::Impl::watchdog_loop() {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    DDP_LOG_WARNING("{}: watchdog: cudaSetDevice({}) failed: {}", who(), device,
                    cudaGetErrorString(err));
  }
  std::chrono::microseconds interval = kMinPoll;
  for (;;) {
    std::vector<std::shared_ptr<WorkNCCL>> works;
    {
      std::unique_lock<std::mutex> lk(mu);
      if (outstanding.empty()) {
        if (stop) return;
        // Idle: sleep until the next operation; look for asynchronous
        // errors once a second meanwhile (the sweep of no Works below).
        cv.wait_for(lk, kIdleCheck, [&] { return stop || !outstanding.empty(); });
        if (outstanding.empty() && stop) return;
        interval = kMinPoll;
      }
      works = outstanding;
    }
    bool progressed = true;
    try {
      progressed = sweep(*this, works);
    } catch (const std::exception& e) {
      // An exception must not end the thread (std::terminate): give up on the
      // group instead, so that nobody waits forever.
      try {
        abort(false, fmt::format("the watchdog failed: {}", e.what()));
      } catch (...) {
        DDP_LOG_ERROR("{}: the watchdog failed and could not abort the group", who());
      }
    }
    works.clear();
    tear_down_if_asked();  // Note [Async error handling]
    {
      std::lock_guard<std::mutex> lk(mu);
      std::erase_if(outstanding,
                    [](const std::shared_ptr<WorkNCCL>& w) { return w->is_completed(); });
      if (outstanding.empty()) continue;
    }
    interval = progressed ? kMinPoll : std::min(interval * 2, kMaxPoll);
    std::this_thread::sleep_for(interval);
  }
}

}  // namespace ddp::dist
