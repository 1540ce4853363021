// PreemptionWatcher (ddp/parallel/preemption.h): ranks as threads sharing a
// TCPStore agree on one stop step (Note [Agreeing on a stop step]), signals
// being injected with notify() since they belong to the process; the real
// handlers are tested with raise() and pthread_kill() (Note [Preemption
// signals]).

#include "ddp/parallel/preemption.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "ddp/core/error.h"
#include "dist/store_test_util.h"

using namespace ddp;
using parallel::PreemptionOptions;
using parallel::PreemptionWatcher;
using namespace std::chrono_literals;

namespace {

PreemptionOptions injected(const std::string& prefix = "ddp/preemption/") {
  PreemptionOptions o;
  o.install_handlers = false;
  o.key_prefix = prefix;
  return o;
}

// A job of `world` ranks, each with its own client of one TCPStore server
// and a watcher without handlers.
struct Job {
  std::shared_ptr<dist::TCPStore> server;
  std::vector<std::unique_ptr<PreemptionWatcher>> ranks;

  explicit Job(int world, const std::string& prefix = "ddp/preemption/") {
    server = std::make_shared<dist::TCPStore>(dist::test::server_options(10s));
    for (int r = 0; r < world; ++r) {
      std::shared_ptr<dist::Store> store = server;
      if (r > 0)
        store = std::make_shared<dist::TCPStore>(dist::test::client_options(server->port(), 10s));
      ranks.push_back(std::make_unique<PreemptionWatcher>(store, r, world, injected(prefix)));
    }
  }
  PreemptionWatcher& operator[](int r) { return *ranks[size_t(r)]; }
};

// Steps rank r from boundary `from` on until should_stop; the stop step.
int64_t run_until_stop(PreemptionWatcher& w, int64_t from, int64_t limit = 100) {
  for (int64_t s = from; s <= limit; ++s)
    if (w.should_stop(s)) return s;
  return -1;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Preemption, OneSignalledRankStopsEveryRankTwoStepsLater) {
  constexpr int64_t s = 7;
  Job job(3);
  // Rank 2 looked at boundary s before the signal came; rank 1 sees it at
  // boundary s and publishes; rank 0 is a step behind.
  EXPECT_FALSE(job[2].should_stop(s));
  job[1].notify(SIGTERM);
  EXPECT_TRUE(job[1].signalled());
  EXPECT_FALSE(job[0].signalled());
  EXPECT_FALSE(job[1].should_stop(s));
  EXPECT_EQ(job[1].stop_step(), s + 2);
  EXPECT_EQ(run_until_stop(job[0], s - 1), s + 2);
  EXPECT_EQ(run_until_stop(job[1], s + 1), s + 2);
  EXPECT_EQ(run_until_stop(job[2], s + 1), s + 2);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(job[r].stop_step(), s + 2) << "rank " << r;
  EXPECT_FALSE(job[0].signalled());  // it learnt of the stop through the store
}

TEST(Preemption, TwoSignalledRanksAgreeOnOneStep) {
  Job job(2);
  job[0].notify(SIGUSR1);
  EXPECT_FALSE(job[0].should_stop(3));  // publishes 5
  job[1].notify(SIGUSR2);
  EXPECT_FALSE(job[1].should_stop(4));  // would publish 6; adopts 5
  EXPECT_EQ(job[0].stop_step(), 5);
  EXPECT_EQ(job[1].stop_step(), 5);
  EXPECT_FALSE(job[0].should_stop(4));
  EXPECT_TRUE(job[0].should_stop(5));
  EXPECT_TRUE(job[1].should_stop(5));
  EXPECT_EQ(job[0].signal_number(), SIGUSR1);
  EXPECT_EQ(job[1].signal_number(), SIGUSR2);
}

TEST(Preemption, WithoutASignalNoRankStops) {
  Job job(2);
  for (int64_t s = 0; s < 50; ++s) {
    EXPECT_FALSE(job[0].should_stop(s));
    EXPECT_FALSE(job[1].should_stop(s));
  }
  EXPECT_FALSE(job[0].stop_step().has_value());
  EXPECT_FALSE(job[1].signalled());
  EXPECT_EQ(job[0].signal_number(), 0);
  EXPECT_FALSE(job[0].signalled_at().has_value());
}

TEST(Preemption, RankPastTheStopStepRaisesNamingBothSteps) {
  Job job(2);
  job[0].notify(SIGTERM);
  EXPECT_FALSE(job[0].should_stop(3));  // stop after 5
  const std::string e = error_of([&] { job[1].should_stop(7); });
  EXPECT_NE(e.find("completed 7 steps"), std::string::npos) << e;
  EXPECT_NE(e.find("stop after step 5"), std::string::npos) << e;
}

TEST(Preemption, WorldOfOneStopsAtTheNextBoundary) {
  PreemptionWatcher w(injected());
  EXPECT_FALSE(w.should_stop(0));
  EXPECT_FALSE(w.should_stop(1));
  w.notify(SIGTERM);
  EXPECT_TRUE(w.should_stop(2));
  EXPECT_EQ(w.stop_step(), 2);
}

// Ranks stepping in lockstep: a step's collective is a barrier, so ranks are
// at most one step apart (the assumption of Note [Agreeing on a stop step]).
class StepBarrier {
 public:
  explicit StepBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(l, 10s, [&] { return gen_ != gen; }))
      throw std::runtime_error("a rank never came to the step's collective");
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, count_ = 0;
  uint64_t gen_ = 0;
};

TEST(Preemption, RanksInLockstepStopTogetherWhenASignalArrivesMidStep) {
  constexpr int kWorld = 4;
  for (int trial = 0; trial < 6; ++trial) {
    Job job(kWorld, "trial" + std::to_string(trial) + "/");
    StepBarrier collective(kWorld);
    std::vector<int64_t> stopped(kWorld, -1);
    std::vector<std::string> errors(kWorld);
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r)
      threads.emplace_back([&, r] {
        std::mt19937 rng(uint32_t(100 * trial + r));
        try {
          for (int64_t step = 0; step < 100'000;) {
            collective.arrive_and_wait();
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
            ++step;
            if (job[r].should_stop(step)) {
              stopped[size_t(r)] = step;
              return;
            }
          }
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
      });
    // The signal comes from outside, whatever the ranks are doing.
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + 7 * trial));
    job[trial % kWorld].notify(SIGTERM);
    if (trial % 2) job[(trial + 1) % kWorld].notify(SIGUSR1);
    for (auto& t : threads) t.join();
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ(errors[size_t(r)], "") << "trial " << trial << " rank " << r;
      EXPECT_GT(stopped[size_t(r)], 0) << "trial " << trial << " rank " << r;
      EXPECT_EQ(stopped[size_t(r)], stopped[0]) << "trial " << trial << " rank " << r;
    }
  }
}

// --- the real handlers --------------------------------------------------------

std::atomic<int> g_previous_calls{0};
extern "C" void previous_handler(int) { g_previous_calls.fetch_add(1); }

struct ActionGuard {  // restores a signal's action at the end of a test
  int sig;
  struct sigaction saved {};
  explicit ActionGuard(int s) : sig(s) { ::sigaction(sig, nullptr, &saved); }
  ~ActionGuard() { ::sigaction(sig, &saved, nullptr); }
};

void set_action(int sig, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  ::sigaction(sig, &sa, nullptr);
}

void (*current_handler(int sig))(int) {
  struct sigaction sa {};
  ::sigaction(sig, nullptr, &sa);
  return sa.sa_handler;
}

TEST(Preemption, RaisedSignalIsRecordedAndThePreviousHandlerRunsAndIsRestored) {
  ActionGuard guard(SIGUSR1);
  set_action(SIGUSR1, previous_handler);
  g_previous_calls = 0;
  {
    PreemptionWatcher w;
    EXPECT_FALSE(w.signalled());
    const auto before = PreemptionWatcher::Clock::now();
    ASSERT_EQ(::raise(SIGUSR1), 0);
    EXPECT_TRUE(w.signalled());
    EXPECT_EQ(w.signal_number(), SIGUSR1);
    ASSERT_TRUE(w.signalled_at().has_value());
    EXPECT_GE(*w.signalled_at(), before);
    EXPECT_LE(*w.signalled_at(), PreemptionWatcher::Clock::now());
    EXPECT_EQ(g_previous_calls.load(), 1);  // chained
    EXPECT_NE(current_handler(SIGUSR1), previous_handler);
  }
  EXPECT_EQ(current_handler(SIGUSR1), previous_handler);
}

TEST(Preemption, SigtermNoLongerEndsTheProcessAndItsDefaultComesBack) {
  ActionGuard guard(SIGTERM);
  set_action(SIGTERM, SIG_DFL);
  {
    PreemptionWatcher w;
    ASSERT_EQ(::raise(SIGTERM), 0);  // the default would end the test
    EXPECT_TRUE(w.signalled());
    EXPECT_EQ(w.signal_number(), SIGTERM);
    EXPECT_TRUE(w.should_stop(4));  // a world of one
  }
  EXPECT_EQ(current_handler(SIGTERM), SIG_DFL);
}

TEST(Preemption, SignalDuringABlockingStoreWaitIsSeenAndTheWaitGoesOn) {
  ActionGuard guard(SIGUSR2);
  auto server = std::make_shared<dist::TCPStore>(dist::test::server_options(10s));
  auto client = std::make_shared<dist::TCPStore>(dist::test::client_options(server->port(), 10s));
  PreemptionWatcher w;
  std::string got, error;
  std::thread waiter([&] {
    try {
      got = client->get_string("late");  // blocked in the store when the signal comes
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(100ms);
  ASSERT_EQ(::pthread_kill(waiter.native_handle(), SIGUSR2), 0);
  for (int i = 0; i < 200 && !w.signalled(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(w.signalled());
  EXPECT_EQ(w.signal_number(), SIGUSR2);
  server->set("late", "value");
  waiter.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(got, "value");
}

TEST(Preemption, ASecondWatcherWithHandlersIsRefused) {
  std::optional<PreemptionWatcher> first;
  first.emplace();
  try {
    PreemptionWatcher second;
    FAIL() << "a second watcher was made";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("another watcher"), std::string::npos) << e.what();
  }
  PreemptionWatcher without_handlers(injected());  // may coexist
  first.reset();
  PreemptionWatcher again;  // the first is gone
  EXPECT_FALSE(again.signalled());
}

// --- options and the grace period --------------------------------------------

TEST(Preemption, BadOptionsRaiseValueError) {
  auto with = [](std::function<void(PreemptionOptions&)> edit) {
    PreemptionOptions o;
    edit(o);
    return o;
  };
  const std::vector<std::pair<PreemptionOptions, std::string>> cases = {
      {with([](auto& o) { o.signals = {}; }), "no signals"},
      {with([](auto& o) { o.signals = {SIGKILL}; }), "SIGKILL"},
      {with([](auto& o) {
         o.signals = {SIGTERM, SIGTERM};
       }),
       "named twice"},
      {with([](auto& o) { o.grace = -1ms; }), "-1 ms"},
  };
  for (const auto& [options, words] : cases) {
    try {
      PreemptionWatcher w(options);
      ADD_FAILURE() << "no error for " << words;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(PreemptionWatcher(nullptr, 0, 2, injected()), ValueError);
  auto server = std::make_shared<dist::TCPStore>(dist::test::server_options());
  EXPECT_THROW(PreemptionWatcher(server, 2, 2, injected()), ValueError);
  PreemptionWatcher w(injected());
  EXPECT_THROW(w.notify(0), ValueError);
  EXPECT_THROW(w.should_stop(-1), ValueError);
}

TEST(Preemption, GraceComesFromTheOptionsTheEnvironmentOrThirtySeconds) {
  dist::test::EnvGuard env("DDP_PREEMPT_GRACE_S");
  EXPECT_EQ(PreemptionWatcher(injected()).grace(), 30s);
  ::setenv("DDP_PREEMPT_GRACE_S", "12.5", 1);
  EXPECT_EQ(PreemptionWatcher(injected()).grace(), 12500ms);
  PreemptionOptions o = injected();
  o.grace = 3s;
  EXPECT_EQ(PreemptionWatcher(o).grace(), 3s);
  for (const char* bad : {"-1", "soon"}) {
    ::setenv("DDP_PREEMPT_GRACE_S", bad, 1);
    try {
      PreemptionWatcher w(injected());
      ADD_FAILURE() << "no error for " << bad;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("DDP_PREEMPT_GRACE_S"), std::string::npos) << e.what();
    }
  }
}

TEST(Preemption, DeadlineIsTheSignalTimePlusTheGrace) {
  PreemptionOptions o = injected();
  o.grace = 10s;
  Job job(2);
  PreemptionWatcher w(o);
  EXPECT_EQ(w.deadline(), PreemptionWatcher::Clock::time_point::max());
  EXPECT_EQ(w.grace_left(), 10s);
  w.notify(SIGTERM);
  EXPECT_EQ(w.deadline(), *w.signalled_at() + 10s);
  EXPECT_LE(w.grace_left(), 10s);
  EXPECT_GT(w.grace_left(), 9s);
  // A rank that learns of the stop through the store counts from then.
  job[0].notify(SIGTERM);
  job[0].should_stop(1);
  const auto before = PreemptionWatcher::Clock::now();
  job[1].should_stop(1);
  EXPECT_GE(job[1].deadline(), before + job[1].grace());
  EXPECT_LE(job[1].deadline(), PreemptionWatcher::Clock::now() + job[1].grace());
}

}  // namespace
