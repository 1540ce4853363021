#pragma once
// Work: the handle of one asynchronous collective (the twin of c10d's Work).
//
// Note [Work completion]
// A backend completes a Work exactly once, from whatever thread ran the
// collective, with success or an exception. wait() blocks the caller until
// then (or until the timeout, raising TimeoutError) and rethrows the
// collective's exception on every waiter, so an error in a background
// communication thread always reaches the rank's main thread. For CUDA
// tensors the NCCL backend additionally orders the current stream after the
// collective's stream (see its own Note); host-staged backends complete only
// after the result is back in the tensor.

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddp/tensor/tensor.h"

namespace ddp::dist {

class FlightRecorder;

class Work {
 public:
  explicit Work(std::string op) : op_(std::move(op)) {}
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  const std::string& op() const { return op_; }
  bool is_completed() const;
  bool is_success() const;  // completed without an error
  std::exception_ptr exception() const;
  // When the backend completed it (steady clock); the epoch before then.
  // The DDP engine's bucket timeline reads it.
  std::chrono::steady_clock::time_point completed_at() const;
  // Blocks until completion; rethrows the collective's error. A zero timeout
  // means no limit. Raises TimeoutError naming the op when the limit passes.
  virtual void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // The tensors that hold the result (for allgather: the outputs).
  const Tensors& result() const { return result_; }

  // ---- for backends --------------------------------------------------------
  void set_result(Tensors result) { result_ = std::move(result); }
  void mark_completed(std::exception_ptr error = nullptr);
  // Runs fn (for example a copy back from a staging buffer) when the work
  // completes successfully, before waiters are released. Backends only.
  void on_success(std::function<void()> fn) { on_success_.push_back(std::move(fn)); }
  // The flight-recorder entry this Work reports its start, end and state to
  // (Note [Flight recorder]); set by ProcessGroup as the collective is issued.
  // A Work completed before this call reports at once.
  void attach_record(std::shared_ptr<FlightRecorder> recorder, uint64_t seq);
  // The backend began running it (a host backend's worker picked it up).
  void mark_started();
  // Sequence number in its group's flight recorder; 0 when not recorded.
  uint64_t record_seq() const;

 private:
  std::string op_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool completed_ = false;
  std::chrono::steady_clock::time_point completed_at_{};
  std::exception_ptr error_;
  Tensors result_;
  std::vector<std::function<void()>> on_success_;
  std::shared_ptr<FlightRecorder> recorder_;
  uint64_t record_seq_ = 0;
};

using WorkPtr = std::shared_ptr<Work>;

// A Work that is already complete (for world size 1 and empty inputs).
WorkPtr completed_work(const std::string& op, Tensors result = {});

}  // namespace ddp::dist
