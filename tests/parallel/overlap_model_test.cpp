// The overlapped step's model and planner (Note [Overlapped step model] in
// include/ddp/parallel/bucket_tuner.h): hand-computed timelines in which
// holding back, chunking and the issue ratio each change the wait, the
// bound against the synchronous model on random timelines, the planner's
// choices at the extremes of the link, and the bad inputs.

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/parallel/bucket_tuner.h"

using namespace ddp;
using namespace ddp::parallel;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr size_t kMiBBytes = size_t(1) << 20;

OverlapSchedule schedule(int priority, double chunk_mb = 0, double ratio = 1.0,
                         double forward_ratio = 0.5) {
  OverlapSchedule s;
  s.priority_buckets = priority;
  s.chunks = {chunk_mb, ratio};
  s.forward_ratio = forward_ratio;
  return s;
}

// Ready at 0, 1, 2 s, 100 bytes each, one bucket each; alpha 0.5 s and 1 s
// per 100 bytes.
TEST(OverlapModel, HandComputedWholeBuckets) {
  const std::vector<GradInfo> g = {{0, 100}, {1, 100}, {2, 100}};
  const AlphaBeta link{0.5, 0.01};
  const std::vector<std::vector<size_t>> buckets = {{0}, {1}, {2}};
  // Priority 1: [0, 1.5], [1.5, 3], and at the end (2) [3, 4.5]. The
  // forward needs bucket 2 at 2 (waits 2.5), bucket 1 at 2.5 + 2.5 = 5 and
  // bucket 0 at 3 + 2.5: no more waiting.
  EXPECT_NEAR(simulate_overlap_exposed_s(g, buckets, link, schedule(1)), 2.5, 1e-12);
  EXPECT_NEAR(simulate_exposed_s(g, buckets, link), 2.5, 1e-12);
  // Priority 2: [0, 1.5]; at the end bucket 2 [2, 3.5] then bucket 1
  // [3.5, 5]. Bucket 2 waits 1.5; bucket 1 is needed at 2.5 + 1.5 = 4 and
  // waits 1 more.
  EXPECT_NEAR(simulate_overlap_exposed_s(g, buckets, link, schedule(2)), 2.5, 1e-12);
  // A slower forward needs the later buckets later: forward_ratio 2 leaves
  // bucket 1 needed at 2 + 2 + 1.5 = 5.5, after it finished.
  EXPECT_NEAR(simulate_overlap_exposed_s(g, buckets, link, schedule(2, 0, 1, 2.0)), 1.5, 1e-12);
}

// A 4 MiB last layer ready at 1.5 s and a 1 MiB first layer at 2 s; alpha
// 0.01 s, 0.25 s per MiB.
TEST(OverlapModel, ChunksLetTheFirstLayerOvertakeTheBacklog) {
  const std::vector<GradInfo> g = {{1.5, 4 * kMiBBytes}, {2.0, 1 * kMiBBytes}};
  const AlphaBeta link{0.01, 0.25 / kMiB};
  const std::vector<std::vector<size_t>> buckets = {{0}, {1}};
  // Whole buckets: [1.5, 2.51], then the first layer [2.51, 2.77]: waits 0.77.
  EXPECT_NEAR(simulate_overlap_exposed_s(g, buckets, link, schedule(1)), 0.77, 1e-9);
  // 1 MiB chunks all issued at release: the same 4 MiB ahead, plus 3 more alphas.
  EXPECT_NEAR(simulate_overlap_exposed_s(g, buckets, link, schedule(1, 1.0, 1.0)), 0.80, 1e-9);
  // Half issued at release ([1.5, 1.76], [1.76, 2.02]); at the end the
  // first layer [2.02, 2.28] overtakes the other two ([2.28, 2.54],
  // [2.54, 2.80]). It waits 0.28; the last layer, needed at 2.25 + 0.28 =
  // 2.53, waits 0.27.
  EXPECT_NEAR(simulate_overlap_exposed_s(g, buckets, link, schedule(1, 1.0, 0.5)), 0.55, 1e-9);
}

// One priority bucket and whole buckets run the link as the synchronous
// model does, and no bucket is needed before the end of backward: never
// more waiting than the synchronous prediction. The planner's choice is at
// least as good as that for every cap it tries.
TEST(OverlapModel, NeverWorseThanSynchronousOnRandomTimelines) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> gap(0.0, 0.02), mib(0.01, 3.0);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<GradInfo> g(12);
    double t = 0;
    for (size_t i = g.size(); i-- > 0;) {
      t += gap(rng);
      g[i] = {t, size_t(mib(rng) * kMiB)};
    }
    const AlphaBeta link{1e-4 * (1 + trial % 5), 1e-3 / kMiB * (1 + trial % 7)};
    const OverlapPlan plan = plan_overlap(g, link);
    for (double cap_mb : {1.0, 2.0, 5.0, 10.0, 25.0}) {
      const auto buckets = buckets_by_cap(g, size_t(cap_mb * kMiB));
      const double sync = simulate_exposed_s(g, buckets, link);
      EXPECT_LE(simulate_overlap_exposed_s(g, buckets, link, schedule(1)), sync + 1e-12);
      EXPECT_LE(plan.predicted_exposed_s, sync + 1e-6);
    }
    EXPECT_NEAR(simulate_overlap_exposed_s(g, plan.buckets, link, plan.schedule),
                plan.predicted_exposed_s, 1e-12);
  }
}

TEST(OverlapModel, PlannerAvoidsChunksWhenEachCollectiveIsCostly) {
  const std::vector<GradInfo> g = {{1.5, 4 * kMiBBytes}, {2.0, 1 * kMiBBytes}};
  // A collective costs a second: one bucket, one collective.
  OverlapPlan costly = plan_overlap(g, AlphaBeta{1.0, 0.25 / kMiB});
  EXPECT_EQ(costly.schedule.chunks.chunk_mb, 0.0);
  EXPECT_EQ(costly.collectives, costly.buckets.size());
  // Free collectives: the planner finds the overtaking schedule, better
  // than whole buckets.
  OverlapPlan free = plan_overlap(g, AlphaBeta{0.0, 0.25 / kMiB});
  const double whole = simulate_overlap_exposed_s(g, free.buckets, AlphaBeta{0.0, 0.25 / kMiB},
                                                  schedule(1));
  EXPECT_LT(free.predicted_exposed_s, whole - 0.1);
}

TEST(OverlapModel, BucketsByCap) {
  const std::vector<GradInfo> g = {{3, 600}, {2, 600}, {1, 600}, {0, 2000}};
  // Ready order 3, 2, 1, 0; a gradient larger than the cap is alone.
  EXPECT_EQ(buckets_by_cap(g, 1000),
            (std::vector<std::vector<size_t>>{{3}, {2}, {1}, {0}}));
  EXPECT_EQ(buckets_by_cap(g, 1200), (std::vector<std::vector<size_t>>{{3}, {2, 1}, {0}}));
  EXPECT_EQ(buckets_by_cap(g, 1 << 20), (std::vector<std::vector<size_t>>{{3, 2, 1, 0}}));
  EXPECT_THROW(buckets_by_cap(g, 0), ValueError);
  EXPECT_THROW(buckets_by_cap({}, 10), ValueError);
}

TEST(OverlapModel, BadInputs) {
  const std::vector<GradInfo> g = {{0, 4}, {1, 4}};
  const AlphaBeta link{1e-3, 1e-6};
  const std::vector<std::vector<size_t>> ok = {{0}, {1}};
  EXPECT_THROW(simulate_overlap_exposed_s(g, ok, link, schedule(0)), ValueError);
  EXPECT_THROW(simulate_overlap_exposed_s(g, ok, link, schedule(1, -1.0)), ValueError);
  EXPECT_THROW(simulate_overlap_exposed_s(g, ok, link, schedule(1, 1.0, 0.0)), ValueError);
  EXPECT_THROW(simulate_overlap_exposed_s(g, ok, link, schedule(1, 1.0, 1.5)), ValueError);
  EXPECT_THROW(simulate_overlap_exposed_s(g, ok, link, schedule(1, 0, 1, -0.5)), ValueError);
  EXPECT_THROW(simulate_overlap_exposed_s(g, {{0}}, link, schedule(1)), ValueError);
  EXPECT_THROW(simulate_overlap_exposed_s(g, ok, AlphaBeta{-1, 0}, schedule(1)), ValueError);
  EXPECT_THROW(plan_overlap(g, link, -1.0), ValueError);
  EXPECT_THROW(plan_overlap({}, link), ValueError);
}

}  // namespace
