#include "ddp/dist/work.h"

#include "ddp/core/error.h"
#include "ddp/core/logging.h"

namespace ddp::dist {

bool Work::is_completed() const {
  std::lock_guard<std::mutex> g(mu_);
  return completed_;
}

bool Work::is_success() const {
  std::lock_guard<std::mutex> g(mu_);
  return completed_ && !error_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> g(mu_);
  return error_;
}

std::chrono::steady_clock::time_point Work::completed_at() const {
  std::lock_guard<std::mutex> g(mu_);
  return completed_at_;
}

void Work::mark_completed(std::exception_ptr error) {
  // Post-processing (copy-back from staging buffers) runs before waiters are
  // released, and its failure becomes the work's error.
  if (!error) {
    try {
      for (auto& fn : on_success_) fn();
    } catch (...) {
      error = std::current_exception();
    }
  }
  on_success_.clear();
  {
    std::lock_guard<std::mutex> g(mu_);
    if (completed_) {
      DDP_LOG_WARNING("work '{}' completed twice; ignoring the second completion", op_);
      return;
    }
    completed_ = true;
    completed_at_ = std::chrono::steady_clock::now();
    error_ = error;
  }
  cv_.notify_all();
}

void Work::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  auto done = [&] { return completed_; };
  if (timeout.count() <= 0) {
    cv_.wait(lk, done);
  } else if (!cv_.wait_for(lk, timeout, done)) {
    DDP_THROW(TimeoutError, "{}: not completed within {:.1f} s", op_, timeout.count() / 1000.0);
  }
  if (error_) std::rethrow_exception(error_);
}

WorkPtr completed_work(const std::string& op, Tensors result) {
  auto w = std::make_shared<Work>(op);
  w->set_result(std::move(result));
  w->mark_completed();
  return w;
}

}  // namespace ddp::dist
