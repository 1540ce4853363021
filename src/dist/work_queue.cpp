// See Note [One worker per group] in work_queue.h.

#include "work_queue.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "ddp/core/error.h"

namespace ddp::dist::detail {

void WorkQueue::start(Poller poller, int threads) {
  DDP_CHECK(threads >= 1, "{}: a work queue needs at least one worker, got {}", backend_, threads);
  DDP_CHECK(threads == 1 || !poller.has_pending, "{}: a Poller needs a single worker", backend_);
  poller_ = std::move(poller);
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { loop(); });
}

WorkPtr WorkQueue::submit(const std::string& op, Tensors result, std::function<bool()> run,
                          bool fence) {
  return submit_with_work(
      op, std::move(result), [run = std::move(run)](const WorkPtr&) { return run(); }, fence);
}

WorkPtr WorkQueue::submit_with_work(const std::string& op, Tensors result,
                                    std::function<bool(const WorkPtr&)> run, bool fence) {
  auto w = std::make_shared<Work>(op);
  w->set_result(std::move(result));
  {
    std::lock_guard<std::mutex> lk(mu_);
    DDP_CHECK(!stop_, "{} ({} rank {}): the process group is shutting down", op, backend_, rank_);
    queue_.push_back(Task{w, std::move(run), fence});
  }
  cv_.notify_one();
  return w;
}

void WorkQueue::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_)
    if (t.joinable()) t.join();
  workers_.clear();
}

void WorkQueue::loop() {
  auto pending = [this] { return poller_.has_pending && poller_.has_pending(); };
  auto backoff = std::chrono::microseconds(0);
  bool cancelled = false;
  for (;;) {
    std::optional<Task> task;
    {
      std::unique_lock<std::mutex> lk(mu_);
      // A fence at the front waits for the running tasks, and with it
      // everything behind it: tasks start in submission order.
      auto ready = [&] { return can_take() || (stop_ && queue_.empty()); };
      if (!pending())
        cv_.wait(lk, ready);
      else if (backoff.count() > 0)
        cv_.wait_for(lk, backoff, ready);
      if (can_take()) {
        task = std::move(queue_.front());
        queue_.pop_front();
        ++running_;
        if (can_take()) cv_.notify_one();  // another idle worker may start the next
      } else if (stop_ && queue_.empty() && !pending()) {
        return;
      } else if (stop_ && queue_.empty() && !cancelled) {
        // Nothing more will be queued: what waits for a peer that never
        // comes would hang the shutdown.
        if (poller_.cancel) poller_.cancel();
        cancelled = true;
      }
    }
    if (task) {
      bool done = true;
      std::exception_ptr err;
      task->work->mark_started();  // Note [Flight recorder]
      try {
        done = task->run(task->work);
      } catch (...) {
        err = std::current_exception();
      }
      if (done || err) task->work->mark_completed(err);
      {
        std::lock_guard<std::mutex> lk(mu_);
        --running_;
      }
      cv_.notify_all();  // a fence may wait for this one; stop() for the last
    }
    if (!pending()) continue;
    if (poller_.poll() || task)
      backoff = std::chrono::microseconds(0);
    else
      backoff = std::min(std::chrono::microseconds(50), backoff * 2 + std::chrono::microseconds(1));
  }
}

}  // namespace ddp::dist::detail
