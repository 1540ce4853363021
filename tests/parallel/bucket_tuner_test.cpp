// Automatic bucket sizes: the alpha-beta fit, the exposed-time simulator and
// the planner on synthetic timelines whose optimum is known (or found by
// brute force), the Reducer's rebuild_buckets / last_grad_ready_times, and
// DistributedDataParallel's auto_bucket_size in a world of one.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "ddp/nn/container.h"
#include "ddp/nn/linear.h"
#include "ddp/parallel/bucket_tuner.h"
#include "ddp/parallel/distributed.h"
#include "ddp/tensor/ops.h"
#include "ddp/dist/work.h"
#include "parallel/world_of_one.h"

using namespace ddp;
using namespace ddp::parallel;

namespace {

using Buckets = std::vector<std::vector<size_t>>;

std::shared_ptr<ddp::test::WorldOfOne> solo() { return std::make_shared<ddp::test::WorldOfOne>(); }

// n parameters of `bytes` each, ready every `gap` seconds, the last
// registered first (as backward produces them).
std::vector<GradInfo> evenly_ready(size_t n, size_t bytes, double gap) {
  std::vector<GradInfo> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = {double(n - 1 - i) * gap, bytes};
  return g;
}

size_t count_params(const Buckets& b) {
  size_t n = 0;
  for (const auto& x : b) n += x.size();
  return n;
}

TEST(FitAlphaBeta, RecoversAnExactLine) {
  const double alpha = 2e-4, beta = 1e-9;
  std::vector<double> x = {1e4, 1e6, 1e7}, y;
  for (double b : x) y.push_back(alpha + beta * b);
  AlphaBeta ab = fit_alpha_beta(x, y);
  EXPECT_NEAR(ab.alpha_s, alpha, 1e-12);
  EXPECT_NEAR(ab.beta_s_per_byte, beta, 1e-18);
  EXPECT_NEAR(ab.time_s(5e6), alpha + beta * 5e6, 1e-12);
}

TEST(FitAlphaBeta, SmallCollectivesFixAlphaDespiteNoiseOnLargeOnes) {
  // alpha 300 us, 1 GB/s; the 32 MiB sample is 2% slow (7 ms of noise,
  // 20 times alpha): plain least squares would put alpha near 0.
  const double alpha = 3e-4, beta = 1e-9;
  std::vector<double> x = {4096, 65536, 1 << 20, 8 << 20, 32 << 20}, y;
  for (double b : x) y.push_back(alpha + beta * b);
  y.back() *= 1.02;
  AlphaBeta ab = fit_alpha_beta(x, y);
  EXPECT_NEAR(ab.alpha_s, alpha, 0.1 * alpha);
  EXPECT_NEAR(ab.beta_s_per_byte, beta, 0.03 * beta);
}

TEST(FitAlphaBeta, ClampsANegativeInterceptToZero) {
  AlphaBeta ab = fit_alpha_beta({1e3, 2e3}, {0.0, 1.0});  // intercept -1
  EXPECT_EQ(ab.alpha_s, 0.0);
  EXPECT_GT(ab.beta_s_per_byte, 0.0);
}

TEST(FitAlphaBeta, BadInputs) {
  EXPECT_THROW(fit_alpha_beta({1e3}, {1.0}), ValueError);              // one sample
  EXPECT_THROW(fit_alpha_beta({1e3, 1e3}, {1.0, 2.0}), ValueError);    // one size
  EXPECT_THROW(fit_alpha_beta({1e3, 2e3}, {1.0}), ValueError);         // lengths differ
  EXPECT_THROW(fit_alpha_beta({1e3, 2e3}, {1.0, -1.0}), ValueError);   // negative time
  EXPECT_THROW(fit_alpha_beta({1e3, NAN}, {1.0, 2.0}), ValueError);    // not finite
}

TEST(SimulateExposed, HandComputedTimeline) {
  // Ready at 0, 1, 2 (s), 100 bytes each; alpha 0.5 s, beta 0.01 s/byte.
  std::vector<GradInfo> g = {{0, 100}, {1, 100}, {2, 100}};
  AlphaBeta link{0.5, 0.01};
  // One bucket: starts at 2, takes 0.5 + 3 = 3.5 -> exposed 3.5.
  EXPECT_DOUBLE_EQ(simulate_exposed_s(g, {{0, 1, 2}}, link), 3.5);
  // Three buckets: [0,1.5], [1.5,3], [3,4.5] -> exposed 2.5.
  EXPECT_DOUBLE_EQ(simulate_exposed_s(g, {{0}, {1}, {2}}, link), 2.5);
  // {0,1} then {2}: [1,3.5], [3.5,5] -> exposed 3.
  EXPECT_DOUBLE_EQ(simulate_exposed_s(g, {{0, 1}, {2}}, link), 3.0);
}

TEST(SimulateExposed, BadPartitions) {
  std::vector<GradInfo> g = {{0, 4}, {1, 4}};
  AlphaBeta link{1e-3, 1e-6};
  EXPECT_THROW(simulate_exposed_s(g, {{0}}, link), ValueError);          // one missing
  EXPECT_THROW(simulate_exposed_s(g, {{0, 1}, {1}}, link), ValueError);  // twice
  EXPECT_THROW(simulate_exposed_s(g, {{0, 2}}, link), ValueError);       // out of range
  EXPECT_THROW(simulate_exposed_s(g, {{0, 1}, {}}, link), ValueError);   // empty bucket
  EXPECT_THROW(simulate_exposed_s(g, {{0, 1}}, AlphaBeta{-1, 0}), ValueError);
}

TEST(PlanBuckets, AllReadyAtOnceGivesOneBucket) {
  // Nothing to overlap with: every extra bucket only adds alpha.
  std::vector<GradInfo> g(5, GradInfo{1.0, 1000});
  BucketPlan p = plan_buckets(g, {1e-3, 1e-6});
  ASSERT_EQ(p.buckets.size(), 1u);
  EXPECT_EQ(p.buckets[0], (std::vector<size_t>{4, 3, 2, 1, 0}));  // ties: reverse registration
  EXPECT_NEAR(p.predicted_exposed_s, 1e-3 + 5000 * 1e-6, 1e-12);
}

TEST(PlanBuckets, FreeLatencyGivesOneBucketPerGradient) {
  // alpha 0 and each transfer shorter than the gap: sending each gradient
  // as soon as it is ready leaves only the last one's transfer exposed.
  auto g = evenly_ready(6, 1000, 1.0);
  BucketPlan p = plan_buckets(g, {0.0, 1e-4});  // 0.1 s per gradient
  EXPECT_EQ(p.buckets.size(), 6u);
  EXPECT_NEAR(p.predicted_exposed_s, 0.1, 1e-12);
  EXPECT_EQ(p.buckets.front(), (std::vector<size_t>{5}));  // ready first
}

TEST(PlanBuckets, HugeLatencyGivesOneBucket) {
  auto g = evenly_ready(6, 1000, 1e-3);
  BucketPlan p = plan_buckets(g, {10.0, 1e-9});
  EXPECT_EQ(p.buckets.size(), 1u);
}

TEST(PlanBuckets, MatchesBruteForceOnRandomTimelines) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> time(0, 1);
  std::uniform_int_distribution<size_t> bytes(1, 5000);
  for (int trial = 0; trial < 50; ++trial) {
    const size_t n = 7;
    std::vector<GradInfo> g(n);
    for (auto& x : g) x = {time(rng), bytes(rng)};
    AlphaBeta link{time(rng) * 0.2, time(rng) * 1e-4};
    BucketPlan p = plan_buckets(g, link);
    ASSERT_EQ(count_params(p.buckets), n);
    EXPECT_NEAR(simulate_exposed_s(g, p.buckets, link), p.predicted_exposed_s, 1e-9);
    // Every contiguous split of the ready order (2^(n-1) of them).
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return g[a].ready_s < g[b].ready_s; });
    double best = std::numeric_limits<double>::infinity();
    for (unsigned mask = 0; mask < (1u << (n - 1)); ++mask) {
      Buckets b(1);
      for (size_t k = 0; k < n; ++k) {
        b.back().push_back(order[k]);
        if (k + 1 < n && (mask >> k & 1u)) b.emplace_back();
      }
      best = std::min(best, simulate_exposed_s(g, b, link));
    }
    EXPECT_NEAR(p.predicted_exposed_s, best, 1e-9) << "trial " << trial;
  }
}

TEST(PlanBuckets, BadInputs) {
  EXPECT_THROW(plan_buckets({}, {1e-3, 1e-9}), ValueError);
  EXPECT_THROW(plan_buckets({{-1.0, 4}}, {1e-3, 1e-9}), ValueError);
  EXPECT_THROW(plan_buckets({{NAN, 4}}, {1e-3, 1e-9}), ValueError);
  EXPECT_THROW(plan_buckets({{0.0, 4}}, {INFINITY, 1e-9}), ValueError);
}

// ---- the Reducer's two APIs and DDP's option ---------------------------------

// Three layers of 4x4 + 4 (weight, bias): six parameters.
std::shared_ptr<nn::Sequential> mlp() {
  manual_seed(5);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::Linear>(4, 4),
      std::make_shared<nn::Linear>(4, 4)});
}

std::vector<std::vector<float>> grads_of(const std::shared_ptr<nn::Sequential>& m) {
  std::vector<std::vector<float>> g;
  for (const Tensor& p : m->parameters()) g.push_back(p.grad().to_vector<float>());
  return g;
}

TEST(ReducerRebuild, TakesTheAssignmentAndKeepsTheGradients) {
  auto model = mlp();
  DistributedDataParallel<nn::Sequential> ddp_model(model, solo(), {.rebuild_buckets = false});
  Tensor x = randn({2, 4});
  EXPECT_TRUE(ddp_model.reducer().last_grad_ready_times().empty());
  sum(ddp_model(x)).backward();
  auto times = ddp_model.reducer().last_grad_ready_times();
  ASSERT_EQ(times.size(), 6u);
  // Backward reaches the last layer first.
  EXPECT_LE(times[5], times[0]);
  auto before = grads_of(model);
  Buckets want = {{5, 4}, {3}, {2, 1, 0}};
  ddp_model.reducer().rebuild_buckets(want);
  EXPECT_EQ(ddp_model.reducer().bucket_assignment(), want);
  EXPECT_EQ(grads_of(model), before);  // copied into the new buffers
  Tensors params = model->parameters();
  EXPECT_EQ(params[5].grad().storage().data(), params[4].grad().storage().data());
  EXPECT_NE(params[5].grad().storage().data(), params[3].grad().storage().data());
  // The next backward accumulates into the new buckets.
  sum(ddp_model(x)).backward();
  for (size_t i = 0; i < before.size(); ++i)
    for (size_t k = 0; k < before[i].size(); ++k)
      EXPECT_FLOAT_EQ(grads_of(model)[i][k], 2 * before[i][k]);
}

TEST(ReducerRebuild, BadAssignments) {
  auto model = mlp();
  DistributedDataParallel<nn::Sequential> ddp_model(model, solo());
  Reducer& r = ddp_model.reducer();
  const Buckets original = r.bucket_assignment();
  EXPECT_THROW(r.rebuild_buckets({{5, 4, 3, 2, 1}}), ValueError);           // 0 missing
  EXPECT_THROW(r.rebuild_buckets({{5, 4, 3, 2, 1, 0, 0}}), ValueError);     // 0 twice
  EXPECT_THROW(r.rebuild_buckets({{5, 4, 3, 2, 1, 6}}), ValueError);        // out of range
  EXPECT_THROW(r.rebuild_buckets({{5, 4, 3, 2, 1, 0}, {}}), ValueError);    // empty bucket
  EXPECT_EQ(r.bucket_assignment(), original);  // nothing changed
}

TEST(AutoBucketSize, RebuildsOnceAfterTheMeasuredIterations) {
  auto model = mlp();
  auto plain = mlp();
  DDPOptions o;
  o.auto_bucket_size = true;
  o.auto_bucket_iterations = 2;
  DistributedDataParallel<nn::Sequential> ddp_model(model, solo(), o);
  ASSERT_NE(ddp_model.bucket_tuner(), nullptr);
  Tensor x = randn({3, 4});
  // 1 warm-up + 2 measured backward passes; the tuner runs at the next
  // forward (the 4th, here inside no_sync).
  for (int i = 0; i < 3; ++i) {
    model->zero_grad();
    sum(ddp_model(x)).backward();
    EXPECT_FALSE(ddp_model.bucket_tuner()->done()) << "iteration " << i;
  }
  {
    auto guard = ddp_model.no_sync();  // its backward is local: not a sample
    model->zero_grad();
    sum(ddp_model(x)).backward();
  }
  model->zero_grad();
  sum(ddp_model(x)).backward();
  ASSERT_TRUE(ddp_model.bucket_tuner()->done());
  const BucketPlan& plan = ddp_model.bucket_tuner()->plan();
  EXPECT_EQ(count_params(plan.buckets), 6u);
  EXPECT_EQ(ddp_model.reducer().bucket_assignment(), plan.buckets);
  EXPECT_GE(plan.predicted_exposed_s, 0.0);
  // The gradients after the rebuild are a plain backward's.
  sum(plain->forward(x)).backward();
  EXPECT_EQ(grads_of(model), grads_of(plain));
}

TEST(AutoBucketSize, BadIterations) {
  DDPOptions o;
  o.auto_bucket_size = true;
  o.auto_bucket_iterations = 0;
  EXPECT_THROW(DistributedDataParallel<nn::Sequential>(mlp(), solo(), o), ValueError);
}

}  // namespace
