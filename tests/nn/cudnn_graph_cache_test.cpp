// GraphCache (kernels/cuda/cudnn_graph_cache.h), the cuDNN layers' plan cache, with
// a plain Entry instead of a cuDNN graph: it holds no cuDNN type, so this
// runs in every build. Note [Per-thread graph caches]: one map per thread,
// stats summed over threads, an exited thread's shard taken over by the
// next new thread, caches that die leaving no stale shard behind.

#include "cuda/cudnn_graph_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ddp {
namespace {

using nn::cudnn_graph::GraphCache;

struct Entry {
  int value = 0;
  std::thread::id built_on;
};

Entry make(int v) { return {v, std::this_thread::get_id()}; }

TEST(CudnnGraphCache, BuildsOncePerKeyAndCountsHits) {
  GraphCache<Entry> cache;
  int builds = 0;
  auto builder = [&] {
    ++builds;
    return make(7);
  };
  auto a = cache.get_or_build("k", builder);
  auto b = cache.get_or_build("k", builder);
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->value, 7);
  cache.get_or_build("other", [&] {
    ++builds;
    return make(8);
  });
  EXPECT_EQ(builds, 2);
  const kernels::PlanCacheStats s = cache.stats();
  EXPECT_EQ(s.entries, 2);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(cache.thread_stats().entries, 2);
}

TEST(CudnnGraphCache, ABuilderThatThrowsCachesNothing) {
  GraphCache<Entry> cache;
  EXPECT_THROW(cache.get_or_build("k", []() -> Entry { throw std::runtime_error("no"); }),
               std::runtime_error);
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_EQ(cache.stats().misses, 1);
  int builds = 0;
  cache.get_or_build("k", [&] {
    ++builds;
    return make(1);
  });
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(cache.stats().entries, 1);
}

// Two threads alive at once never share an entry: each builds its own, on
// itself, and the stats add both up.
TEST(CudnnGraphCache, ConcurrentThreadsEachBuildTheirOwn) {
  auto* cache = new GraphCache<Entry>;  // leaked, as the real caches are
  constexpr int kThreads = 4, kCalls = 200;
  std::barrier both_alive(kThreads);
  std::vector<std::shared_ptr<const Entry>> first(kThreads);
  std::atomic<int> builds{0}, foreign{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      both_alive.arrive_and_wait();  // every thread holds its shard at once
      for (int i = 0; i < kCalls; ++i) {
        auto e = cache->get_or_build("k", [&] {
          ++builds;
          return make(t);
        });
        if (e->built_on != std::this_thread::get_id()) ++foreign;
        if (i == 0)
          first[size_t(t)] = e;
        else if (e.get() != first[size_t(t)].get())
          ++foreign;
      }
      EXPECT_EQ(cache->thread_stats().entries, 1);
      EXPECT_EQ(cache->thread_stats().hits, kCalls - 1);
      both_alive.arrive_and_wait();  // no thread exits (freeing its shard) early
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(builds.load(), kThreads);
  EXPECT_EQ(foreign.load(), 0);
  for (int a = 0; a < kThreads; ++a)
    for (int b = a + 1; b < kThreads; ++b)
      EXPECT_NE(first[size_t(a)].get(), first[size_t(b)].get());
  const kernels::PlanCacheStats s = cache->stats();
  EXPECT_EQ(s.entries, kThreads);  // one graph per thread for the one key
  EXPECT_EQ(s.misses, kThreads);
  EXPECT_EQ(s.hits, kThreads * (kCalls - 1));
  EXPECT_EQ(cache->shard_count(), kThreads);
  // The main thread has not used it: nothing of its own.
  EXPECT_EQ(cache->thread_stats().entries, 0);
}

// A thread that exits hands its shard to the next new thread, which finds
// the graphs built and builds nothing (no leak, no rebuild per thread).
TEST(CudnnGraphCache, ANewThreadTakesOverAnExitedThreadsShard) {
  auto* cache = new GraphCache<Entry>;
  int builds = 0;  // threads run one after another
  auto use = [&] {
    cache->get_or_build("k", [&] {
      ++builds;
      return make(1);
    });
  };
  std::thread(use).join();
  std::thread(use).join();
  std::thread(use).join();
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(cache->shard_count(), 1);
  EXPECT_EQ(cache->stats().entries, 1);
  EXPECT_EQ(cache->stats().hits, 2);
}

// Two caches of one Entry type are separate, also on one thread.
TEST(CudnnGraphCache, CachesDoNotShareShards) {
  GraphCache<Entry> a, b;
  a.get_or_build("k", [] { return make(1); });
  auto e = b.get_or_build("k", [] { return make(2); });
  EXPECT_EQ(e->value, 2);
  EXPECT_EQ(a.stats().entries, 1);
  EXPECT_EQ(b.stats().entries, 1);
}

// A cache that died leaves no stale shard on the thread, even when a new
// cache is allocated where the old one was.
TEST(CudnnGraphCache, ADeadCacheLeavesNothingBehind) {
  for (int round = 0; round < 8; ++round) {
    auto cache = std::make_unique<GraphCache<Entry>>();
    int builds = 0;
    auto e = cache->get_or_build("k", [&] {
      ++builds;
      return make(round);
    });
    EXPECT_EQ(builds, 1) << "round " << round;
    EXPECT_EQ(e->value, round);
    EXPECT_EQ(cache->stats().entries, 1);
    EXPECT_EQ(cache->stats().hits, 0);
  }
}

}  // namespace
}  // namespace ddp
