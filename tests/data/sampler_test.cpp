// Samplers: permutations, per-epoch reshuffling, and DistributedSampler's
// shards (disjoint, covering, equal counts with padding or drop_last, the
// same permutation on every rank).
#include "ddp/data/sampler.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "data/data_test_util.h"

namespace ddp::test {
namespace {

using data::DistributedSampler;

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Sampler, RandomPermutationIsAPermutationAndSeeded) {
  for (int64_t n : {0, 1, 2, 17, 1000}) {
    std::vector<int64_t> p = data::random_permutation(n, 5);
    EXPECT_EQ(sorted(p), iota(n)) << n;
    EXPECT_EQ(p, data::random_permutation(n, 5));
  }
  EXPECT_NE(data::random_permutation(1000, 5), data::random_permutation(1000, 6));
  EXPECT_NE(data::random_permutation(1000, 5), iota(1000));
  // Every element reaches every position about equally often.
  std::vector<int> first(4, 0);
  for (uint64_t s = 0; s < 4000; ++s) ++first[size_t(data::random_permutation(4, s)[0])];
  for (int c : first) EXPECT_NEAR(c, 1000, 150);
}

TEST(Sampler, SequentialAndRandom) {
  data::SequentialSampler seq(5);
  EXPECT_EQ(seq.size(), 5);
  EXPECT_EQ(seq.indices(), iota(5));
  seq.set_epoch(3);
  EXPECT_EQ(seq.indices(), iota(5));

  data::RandomSampler r(100, 7);
  std::vector<int64_t> e0 = r.indices();
  EXPECT_EQ(sorted(e0), iota(100));
  EXPECT_EQ(r.indices(), e0);  // same epoch, same order
  r.set_epoch(1);
  std::vector<int64_t> e1 = r.indices();
  EXPECT_NE(e1, e0);
  EXPECT_EQ(sorted(e1), iota(100));
  r.set_epoch(0);
  EXPECT_EQ(r.indices(), e0);  // an epoch's order can be revisited (resume)
  EXPECT_THROW(data::RandomSampler(-1), ValueError);
}

// All ranks' shards for one epoch.
std::vector<std::vector<int64_t>> shards(int64_t n, int replicas, bool shuffle, bool drop_last,
                                         int64_t epoch, uint64_t seed = 0) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler s(n, replicas, r, shuffle, seed, drop_last);
    s.set_epoch(epoch);
    out.push_back(s.indices());
    EXPECT_EQ(int64_t(out.back().size()), s.size());
  }
  return out;
}

TEST(DistributedSampler, ShardsAreDisjointAndCoverWithoutPadding) {
  // 12 examples on 3 ranks divide evenly: no padding, an exact partition.
  for (bool shuffle : {false, true}) {
    auto sh = shards(12, 3, shuffle, false, 0);
    std::vector<int64_t> all;
    for (const auto& s : sh) {
      EXPECT_EQ(s.size(), 4u);
      all.insert(all.end(), s.begin(), s.end());
    }
    EXPECT_EQ(sorted(all), iota(12)) << shuffle;
  }
  // Unshuffled, rank r takes r, r + R, ... like torch.
  EXPECT_EQ(shards(12, 3, false, false, 0)[1], (std::vector<int64_t>{1, 4, 7, 10}));
}

TEST(DistributedSampler, PaddingWrapsSoAllRanksHaveEqualCounts) {
  for (bool shuffle : {false, true}) {
    auto sh = shards(10, 4, shuffle, false, 2);
    std::map<int64_t, int> count;
    for (const auto& s : sh) {
      EXPECT_EQ(s.size(), 3u);  // ceil(10 / 4)
      for (int64_t i : s) ++count[i];
    }
    // Every example appears; exactly 2 appear twice (12 - 10), namely the
    // first two of the permutation.
    EXPECT_EQ(count.size(), 10u);
    int twice = 0;
    for (auto [i, c] : count) twice += c == 2;
    EXPECT_EQ(twice, 2);
  }
  // Unshuffled: the padded order is 0..9, 0, 1.
  auto sh = shards(10, 4, false, false, 0);
  EXPECT_EQ(sh[2], (std::vector<int64_t>{2, 6, 0}));
  EXPECT_EQ(sh[3], (std::vector<int64_t>{3, 7, 1}));
  // More replicas than examples: padding wraps more than once.
  auto tiny = shards(2, 5, false, false, 0);
  EXPECT_EQ(tiny[4], (std::vector<int64_t>{0}));
  EXPECT_EQ(tiny[2], (std::vector<int64_t>{0}));
}

TEST(DistributedSampler, DropLastDropsTheTail) {
  auto sh = shards(10, 4, true, true, 1);
  std::set<int64_t> seen;
  for (const auto& s : sh) {
    EXPECT_EQ(s.size(), 2u);  // floor(10 / 4)
    for (int64_t i : s) EXPECT_TRUE(seen.insert(i).second) << "duplicate " << i;
  }
  EXPECT_EQ(seen.size(), 8u);
  DistributedSampler s(10, 4, 0, true, 0, true);
  EXPECT_EQ(s.total_size(), 8);
  EXPECT_THROW(DistributedSampler(3, 4, 0, true, 0, true), ValueError);
}

TEST(DistributedSampler, ReshufflesPerEpochIdenticallyOnAllRanks) {
  // The union of the shards (before padding) is the same permutation on
  // every rank: rebuild it position by position from the shards.
  auto merged = [](const std::vector<std::vector<int64_t>>& sh) {
    std::vector<int64_t> order;
    for (size_t k = 0; k < sh[0].size(); ++k)
      for (const auto& s : sh) order.push_back(s[k]);
    return order;
  };
  std::vector<int64_t> e0 = merged(shards(100, 4, true, false, 0, 9));
  std::vector<int64_t> e1 = merged(shards(100, 4, true, false, 1, 9));
  EXPECT_EQ(e0, data::random_permutation(100, 9 + 0));
  EXPECT_EQ(e1, data::random_permutation(100, 9 + 1));
  EXPECT_NE(e0, e1);
  // A sampler built later for the same epoch agrees (resuming).
  DistributedSampler late(100, 4, 3, true, 9);
  late.set_epoch(1);
  EXPECT_EQ(late.indices(), shards(100, 4, true, false, 1, 9)[3]);
  // A different seed gives a different order.
  EXPECT_NE(merged(shards(100, 4, true, false, 0, 10)), e0);
}

TEST(DistributedSampler, BadArguments) {
  EXPECT_THROW(DistributedSampler(10, 0, 0), ValueError);
  EXPECT_THROW(DistributedSampler(10, 2, 2), ValueError);
  EXPECT_THROW(DistributedSampler(10, 2, -1), ValueError);
  EXPECT_THROW(DistributedSampler(-1, 2, 0), ValueError);
  DistributedSampler empty(0, 2, 1);
  EXPECT_EQ(empty.size(), 0);
  EXPECT_TRUE(empty.indices().empty());
}

}  // namespace
}  // namespace ddp::test
