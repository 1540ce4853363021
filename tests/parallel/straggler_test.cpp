// StragglerDetector (Note [Straggler score]): the scoring rule on synthetic
// waits, bad options, the exchange between thread ranks, and three gloo
// ranks training a DDP model where one rank's forward sleeps.

#include "ddp/parallel/straggler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>

#include "ddp/config.h"
#include "ddp/nn/container.h"
#include "ddp/nn/linear.h"
#include "ddp/parallel/distributed.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "dist/store_test_util.h"
#include "parallel/thread_group.h"
#if DDP_HAVE_GLOO
#include "ddp/dist/process_group_gloo.h"
#endif

using namespace ddp;
using parallel::StragglerDetector;
using parallel::StragglerOptions;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void expect_value_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// A detector of a world of `n` that only scores (add_step; no exchange).
StragglerDetector scorer(int n, StragglerOptions o = {}) {
  o.log = false;
  return StragglerDetector(test::thread_groups(n)[0], o);
}

TEST(StragglerRule, TheRankOthersWaitedForIsLate) {
  const StragglerOptions o;  // min_delay 2 ms, margin 0.5
  // Rank 2 waited 1 ms, the others 40 ms: they waited ~39 ms for it.
  EXPECT_EQ(parallel::late_rank({0.040, 0.041, 0.001, 0.040}, o), 2);
  // Everyone waited alike (communication-bound, no straggler).
  EXPECT_EQ(parallel::late_rank({0.040, 0.041, 0.039, 0.040}, o), -1);
  // A gap under min_delay_ms is noise.
  EXPECT_EQ(parallel::late_rank({0.0015, 0.0001, 0.0016}, o), -1);
  // A gap under relative_margin of the next wait is noise too: 30 vs 40 ms.
  EXPECT_EQ(parallel::late_rank({0.040, 0.030, 0.045}, o), -1);
  // Two equally slow ranks: no single outlier, nobody named.
  EXPECT_EQ(parallel::late_rank({0.040, 0.001, 0.001, 0.040}, o), -1);
  // One rank, or a step some rank did not measure, names nobody.
  EXPECT_EQ(parallel::late_rank({0.0}, o), -1);
  EXPECT_EQ(parallel::late_rank({0.040, kNaN, 0.001}, o), -1);
  // Both margins 0: any positive gap counts, a tie never does.
  StragglerOptions zero{.min_delay_ms = 0, .relative_margin = 0};
  EXPECT_EQ(parallel::late_rank({0.002, 0.001}, zero), 1);
  EXPECT_EQ(parallel::late_rank({0.001, 0.001}, zero), -1);
}

TEST(StragglerRule, TailWaitIsLastDoneMinusLastReady) {
  using Clock = parallel::BucketTiming::Clock;
  const auto t0 = Clock::now();
  auto ms = [&](int v) { return t0 + std::chrono::milliseconds(v); };
  std::vector<parallel::BucketTiming> tl(2);
  tl[0].ready = ms(0), tl[0].done = ms(30);
  tl[1].ready = ms(10), tl[1].done = ms(25);  // done before bucket 0: the max is taken
  EXPECT_NEAR(*parallel::tail_wait_seconds(tl), 0.020, 1e-9);
  EXPECT_FALSE(parallel::tail_wait_seconds({}).has_value());
}

TEST(StragglerScore, FractionOfTheWindowAndTypicalDelay) {
  StragglerDetector d = scorer(3, {.window = 10});
  // 7 of 10 steps rank 2 is late (others waited 30 ms), 3 steps nobody.
  // Before the window has filled the score is still out of `window` steps.
  for (int s = 0; s < 3; ++s) d.add_step({0.031, 0.032, 0.001});
  EXPECT_EQ(d.measured_steps(), 3);
  EXPECT_NEAR(d.score(2), 0.3, 1e-12);
  EXPECT_TRUE(d.stragglers().empty());
  for (int s = 0; s < 4; ++s) d.add_step({0.031, 0.032, 0.001});
  for (int s = 0; s < 3; ++s) d.add_step({0.010, 0.011, 0.010});
  EXPECT_EQ(d.measured_steps(), 10);
  EXPECT_NEAR(d.score(2), 0.7, 1e-12);
  EXPECT_EQ(d.score(0), 0.0);
  EXPECT_EQ(d.score(1), 0.0);
  EXPECT_NEAR(d.typical_delay_ms(2), 30.0, 1e-9);  // the smallest other wait minus its own
  EXPECT_EQ(d.stragglers(), std::vector<int>{2});
  // Steps some rank did not measure are left out of the window.
  d.add_step({kNaN, 0.010, 0.010});
  EXPECT_NEAR(d.score(2), 0.7, 1e-12);
  // The window slides: 10 steps without a straggler clear the score.
  for (int s = 0; s < 10; ++s) d.add_step({0.010, 0.011, 0.010});
  EXPECT_EQ(d.score(2), 0.0);
  EXPECT_EQ(d.typical_delay_ms(2), 0.0);
  EXPECT_TRUE(d.stragglers().empty());
  // Rank 0 becomes the straggler.
  for (int s = 0; s < 6; ++s) d.add_step({0.000, 0.020, 0.020});
  EXPECT_NEAR(d.score(0), 0.6, 1e-12);
  EXPECT_EQ(d.stragglers(), std::vector<int>{0});
}

TEST(StragglerScore, BadOptionsAndArguments) {
  auto group = test::solo();
  auto make = [&](StragglerOptions o) { StragglerDetector d(group, o); };
  expect_value_error([&] { make({.interval = 0}); }, "interval must be >= 1");
  expect_value_error([&] { make({.window = 0}); }, "window must be >= 1");
  expect_value_error([&] { make({.window = -5}); }, "window must be >= 1");
  expect_value_error([&] { make({.threshold = 0}); }, "threshold must be in (0, 1]");
  expect_value_error([&] { make({.threshold = 1.5}); }, "threshold must be in (0, 1]");
  expect_value_error([&] { make({.threshold = kNaN}); }, "threshold must be in (0, 1]");
  expect_value_error([&] { make({.min_delay_ms = -1}); }, "min_delay_ms must be finite");
  expect_value_error([&] { make({.relative_margin = 1.0}); }, "relative_margin must be in [0, 1)");
  expect_value_error([&] { StragglerDetector d(nullptr); }, "process group is null");
  StragglerDetector d(group);
  expect_value_error([&] { d.add_step({0.1, 0.2}); }, "2 waits for a world of 1");
  expect_value_error([&] { d.score(1); }, "rank 1 is not in a world of 1");
}

// The waits are exchanged every `interval` observes; every rank ends with
// the same scores.
TEST(StragglerExchange, EveryRankScoresEveryRank) {
  constexpr int kWorld = 3;
  auto groups = test::thread_groups(kWorld);
  std::vector<std::vector<double>> scores(kWorld);
  std::vector<int> exchanges(kWorld, 0);
  test::on_every_rank(kWorld, [&](int rank) {
    StragglerDetector d(groups[size_t(rank)], {.interval = 4, .window = 8, .log = false});
    for (int step = 0; step < 8; ++step)
      exchanges[size_t(rank)] += d.observe_wait(rank == 1 ? 0.0005 : 0.050);
    EXPECT_EQ(d.measured_steps(), 8);
    scores[size_t(rank)] = d.scores();
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(exchanges[size_t(r)], 2);
    EXPECT_EQ(scores[size_t(r)], (std::vector<double>{0.0, 1.0, 0.0})) << "on rank " << r;
  }
}

#if DDP_HAVE_GLOO

// Sleeps in forward on one rank: a slow rank (a slow GPU, a slow data path).
class Sleepy : public nn::UnaryModule {
 public:
  explicit Sleepy(std::chrono::milliseconds delay) : UnaryModule("Sleepy"), delay_(delay) {}
  Tensor forward(const Tensor& x) override {
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    return x;
  }

 private:
  std::chrono::milliseconds delay_;
};

// Three gloo ranks as threads train a small DDP model; rank 1's forward
// sleeps 40 ms each step, so ranks 0 and 2 wait for its buckets. Every
// rank names rank 1, and only rank 1.
TEST(StragglerGloo, SleepingRankIsNamed) {
  constexpr int kWorld = 3, kSlow = 1, kSteps = 20;
  auto server =
      std::make_shared<dist::TCPStore>(dist::test::server_options(std::chrono::seconds(20)));
  std::mutex mu;
  std::vector<std::vector<double>> scores(kWorld);
  std::vector<std::vector<int>> named(kWorld);
  std::vector<double> delay_ms(kWorld);
  std::vector<std::string> errors;
  auto run = [&](int rank) {
    try {
      std::shared_ptr<dist::Store> store = server;
      if (rank > 0)
        store = std::make_shared<dist::TCPStore>(
            dist::test::client_options(server->port(), std::chrono::seconds(20)));
      auto group = dist::ProcessGroupGloo::create(store, rank, kWorld);
      manual_seed(5);
      auto model =
          std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
              std::make_shared<nn::Linear>(8, 16),
              std::make_shared<Sleepy>(std::chrono::milliseconds(rank == kSlow ? 40 : 0)),
              std::make_shared<nn::Linear>(16, 4)});
      parallel::DistributedDataParallel<nn::Sequential> ddp(model, group);
      StragglerDetector d(group, {.interval = 5, .window = 20});
      Generator gen(100 + uint64_t(rank));
      for (int step = 0; step < kSteps; ++step) {
        Tensor x = randn({4, 8}, {}, &gen);
        sum(ddp(x)).backward();
        d.observe(ddp.reducer());
      }
      std::lock_guard<std::mutex> lk(mu);
      scores[size_t(rank)] = d.scores();
      named[size_t(rank)] = d.stragglers();
      delay_ms[size_t(rank)] = d.typical_delay_ms(kSlow);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu);
      errors.push_back(e.what());
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) threads.emplace_back(run, r);
  for (auto& t : threads) t.join();
  ASSERT_TRUE(errors.empty()) << errors.front();
  for (int r = 0; r < kWorld; ++r) {
    SCOPED_TRACE("scores seen by rank " + std::to_string(r));
    EXPECT_EQ(scores[size_t(r)], scores[0]);  // the same data, the same rule
    EXPECT_EQ(named[size_t(r)], std::vector<int>{kSlow});
    EXPECT_GE(scores[size_t(r)][kSlow], 0.8);
    for (int other = 0; other < kWorld; ++other)
      if (other != kSlow) EXPECT_LE(scores[size_t(r)][size_t(other)], 0.1);
    // The others waited about the sleep for it (a loaded machine adds noise).
    EXPECT_GT(delay_ms[size_t(r)], 20.0);
    EXPECT_LT(delay_ms[size_t(r)], 400.0);
  }
}

#endif  // DDP_HAVE_GLOO

}  // namespace
