#include "ddp/dist/work.h"

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/dist/flight_recorder.h"

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

static void report_completion(FlightRecorder& r, uint64_t seq, const std::exception_ptr& error) {
  if (!error) return r.mark_finished(seq, CollectiveState::completed);
  std::string what = "unknown error";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  r.mark_finished(seq, CollectiveState::failed, what);
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
  std::shared_ptr<FlightRecorder> recorder;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (completed_) {
      DDP_LOG_WARNING("work '{}' completed twice; ignoring the second completion", op_);
      return;
    }
    completed_ = true;
    completed_at_ = std::chrono::steady_clock::now();
    error_ = error;
    recorder = recorder_;
  }
  if (recorder) report_completion(*recorder, record_seq_, error);
  cv_.notify_all();
}

void Work::attach_record(std::shared_ptr<FlightRecorder> recorder, uint64_t seq) {
  if (!recorder || seq == 0) return;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> g(mu_);
    recorder_ = std::move(recorder);
    record_seq_ = seq;
    if (!completed_) return;
    error = error_;
  }
  report_completion(*recorder_, seq, error);
}

void Work::mark_started() {
  std::shared_ptr<FlightRecorder> recorder;
  {
    std::lock_guard<std::mutex> g(mu_);
    recorder = recorder_;
  }
  if (recorder) recorder->mark_started(record_seq_);
}

uint64_t Work::record_seq() const {
  std::lock_guard<std::mutex> g(mu_);
  return record_seq_;
}

void Work::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  auto done = [&] { return completed_; };
  if (timeout.count() <= 0) {
    cv_.wait(lk, done);
  } else if (!cv_.wait_for(lk, timeout, done)) {
    auto recorder = recorder_;
    const uint64_t seq = record_seq_;
    lk.unlock();
    std::string dump;
    if (recorder) {
      recorder->mark_finished(seq, CollectiveState::timed_out, "wait() timed out");
      const std::string path = recorder->dump_to_file(fmt::format("{} #{} timed out", op_, seq));
      if (!path.empty()) dump = fmt::format(" (#{}; flight recorder dumped to {})", seq, path);
    }
    DDP_THROW(TimeoutError, "{}: not completed within {:.1f} s{}", op_, timeout.count() / 1000.0,
              dump);
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
