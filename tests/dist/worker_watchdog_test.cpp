// WorkerWatchdog (src/dist/worker_watchdog_mpi.h): the deadline of the mpi
// backend's blocking calls (Note [MPI timeouts]). No MPI here: the "call" is
// the test thread sleeping between begin() and end().

#include <gtest/gtest.h>

#include "ddp/config.h"

#if DDP_HAVE_MPI

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "../../src/dist/worker_watchdog_mpi.h"

namespace {

using namespace std::chrono_literals;
using ddp::dist::Work;
using ddp::dist::WorkPtr;
using ddp::dist::detail::WorkerWatchdog;

// Counts on_timeout calls and returns a runtime_error naming the op.
struct Recorder {
  std::atomic<int> calls{0};
  std::string op;
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds delay{0};  // how long the "report" takes
  WorkerWatchdog::OnTimeout fn() {
    return [this](const char* o, std::chrono::milliseconds t) {
      op = o;
      timeout = t;
      std::this_thread::sleep_for(delay);
      ++calls;
      return std::make_exception_ptr(std::runtime_error(std::string(o) + " timed out"));
    };
  }
};

std::string what(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
  return "";
}

// Polls cond for up to limit.
template <class Cond>
bool eventually(Cond cond, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST(WorkerWatchdog, CallsWithinTheirDeadlineAndWithoutOneEndQuietly) {
  Recorder r;
  WorkerWatchdog w(r.fn());
  for (int i = 0; i < 100; ++i) {
    w.begin("allreduce", 10s);
    EXPECT_EQ(w.end(), nullptr);
  }
  w.begin("allreduce", 0ms);  // no deadline
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(w.end(), nullptr);
  w.stop();
  EXPECT_EQ(r.calls, 0);
  EXPECT_FALSE(w.gave_up());
}

TEST(WorkerWatchdog, AStuckCallFailsItsWorkAndEveryLaterOne) {
  Recorder r;
  WorkerWatchdog w(r.fn());
  auto running = std::make_shared<Work>("allreduce");
  auto queued = std::make_shared<Work>("broadcast");
  auto done = std::make_shared<Work>("barrier");
  w.track(done);
  done->mark_completed();
  w.track(running);
  w.track(queued);
  w.begin("allreduce", 200ms);
  // The "call" does not return: the watchdog makes the report and gives up.
  ASSERT_TRUE(eventually([&] { return w.gave_up(); }));
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.op, "allreduce");
  EXPECT_EQ(r.timeout, 200ms);
  ASSERT_TRUE(running->is_completed());
  ASSERT_TRUE(queued->is_completed());
  EXPECT_EQ(what(running->exception()), "allreduce timed out");
  EXPECT_EQ(what(queued->exception()), "allreduce timed out");
  EXPECT_TRUE(done->is_success());
  // Issued afterwards: failed at once, since the worker will never run it.
  auto later = std::make_shared<Work>("allgather");
  w.track(later);
  ASSERT_TRUE(later->is_completed());
  EXPECT_EQ(what(later->exception()), "allreduce timed out");
  // Should MPI return after all, the worker gets the error too.
  EXPECT_EQ(what(w.end()), "allreduce timed out");
  w.stop();
  EXPECT_EQ(r.calls, 1);
}

TEST(WorkerWatchdog, AWorkerBackBeforeTheReportEndsRaisesTheErrorItself) {
  Recorder r;
  r.delay = 500ms;  // the report outlasts the call
  WorkerWatchdog w(r.fn());
  auto running = std::make_shared<Work>("allreduce");
  w.track(running);
  w.begin("allreduce", 100ms);
  std::this_thread::sleep_for(300ms);    // past the deadline, the report still running
  const std::exception_ptr e = w.end();  // waits for the report
  EXPECT_EQ(what(e), "allreduce timed out");
  EXPECT_EQ(r.calls, 1);
  EXPECT_FALSE(w.gave_up());
  EXPECT_FALSE(running->is_completed());  // the worker completes it, not the watchdog
  w.stop();
}

TEST(WorkerWatchdog, AShorterTimeoutAfterALongCallIsStillHeld) {
  // The watchdog must not sleep towards the first call's distant deadline
  // while a later call's (set_timeout() made shorter) passes.
  Recorder r;
  WorkerWatchdog w(r.fn());
  w.begin("barrier", 300s);
  std::this_thread::sleep_for(250ms);  // the watchdog sees it in flight
  EXPECT_EQ(w.end(), nullptr);
  const auto start = std::chrono::steady_clock::now();
  w.begin("allreduce", 200ms);
  ASSERT_TRUE(eventually([&] { return w.gave_up(); }, 5s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_EQ(r.op, "allreduce");
  w.stop();
}

TEST(WorkerWatchdog, StopIsIdempotentAndQuickWhenIdle) {
  Recorder r;
  WorkerWatchdog w(r.fn());
  const auto start = std::chrono::steady_clock::now();
  w.stop();
  w.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_EQ(r.calls, 0);
}

}  // namespace

#endif  // DDP_HAVE_MPI
