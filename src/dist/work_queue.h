#pragma once
// WorkQueue: the worker thread of a host backend (mpi, gloo).
//
// Note [One worker per group]
// A collective call checks its arguments (base class), stages CUDA tensors,
// queues a task and returns its Work at once; one worker thread per group
// runs the tasks in submission order and completes each Work, a failure
// becoming the Work's exception. Every rank submits the same collectives in
// the same order and one thread runs them in that order, so the ranks always
// meet in the same collective.
//
// A backend may also have requests that a task posts and that finish later
// (MPI's point-to-point): it gives a Poller, which the worker calls between
// tasks and, while nothing is queued, in a short backoff loop.
//
// A queue may have more than one worker (gloo's GlooOptions::threads, Note
// [Gloo collectives in flight] in process_group_gloo.cpp). Tasks still start
// in submission order, but up to `threads` of them run at once and their
// Works may complete out of order; the backend must then keep concurrent
// tasks apart itself (gloo: a tag per collective, assigned at submission).
// A fence task starts only once every task submitted before it has
// completed (a barrier's promise). A Poller needs a single worker.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ddp/dist/work.h"

namespace ddp::dist::detail {

class WorkQueue {
 public:
  struct Poller {
    std::function<bool()> has_pending;  // requests still outstanding?
    std::function<bool()> poll;         // tests them; true when any finished
    std::function<void()> cancel;       // at shutdown: give up on what may never finish
  };

  // backend and rank only label errors.
  WorkQueue(std::string backend, int rank) : backend_(std::move(backend)), rank_(rank) {}
  ~WorkQueue() { stop(); }
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // threads: how many tasks may run at once (>= 1; 1 with a Poller).
  void start(Poller poller = {}, int threads = 1);
  // run returns true when the Work is done, false when it posted a request
  // that the Poller completes later. An exception fails the Work.
  WorkPtr submit(const std::string& op, Tensors result, std::function<bool()> run,
                 bool fence = false);
  // The same, for a task that needs its own Work (to hand it to the Poller).
  WorkPtr submit_with_work(const std::string& op, Tensors result,
                           std::function<bool(const WorkPtr&)> run, bool fence = false);
  // Runs everything already queued, then joins the workers. Idempotent.
  void stop();

 private:
  struct Task {
    WorkPtr work;
    std::function<bool(const WorkPtr&)> run;
    bool fence = false;
  };
  void loop();
  // Under mu_: the front task may start now.
  bool can_take() const {
    return !queue_.empty() && (!queue_.front().fence || running_ == 0);
  }

  std::string backend_;
  int rank_;
  Poller poller_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  int running_ = 0;  // tasks taken and not yet finished
  std::vector<std::thread> workers_;
};

}  // namespace ddp::dist::detail
