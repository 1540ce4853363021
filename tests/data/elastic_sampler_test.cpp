// ElasticSampler (Note [Elastic re-partition]): across any sequence of world
// sizes and failed (redone) steps the committed real samples of an epoch are
// a permutation of the dataset; padding only in the epoch's last step; the
// order is a pure function of (seed, epoch, n); state_dict round trips and
// refuses a mismatched state without changing anything; bad inputs.
#include "ddp/data/elastic_sampler.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "data/data_test_util.h"
#include "ddp/data/sampler.h"

namespace ddp::test {
namespace {

using data::ElasticBatch;
using data::ElasticSampler;

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<ElasticBatch> step_batches(const ElasticSampler& s, int world) {
  std::vector<ElasticBatch> out;
  for (int r = 0; r < world; ++r) out.push_back(s.batch(r, world));
  return out;
}

// The checks every step must pass, failed or committed: equal, non-empty
// lengths; weights 0 or 1, the real entries first; the real entries of all
// ranks are exactly the next G samples of the order, each once; padding
// repeats indices of the slice and only appears when the step ends the
// epoch.
void check_step(const ElasticSampler& s, int world, const std::vector<ElasticBatch>& bs) {
  const int64_t g = std::min<int64_t>(int64_t(world) * s.batch_per_rank(), s.remaining());
  const size_t per = size_t((g + world - 1) / world);
  std::vector<int64_t> real;
  const std::vector<int64_t> slice(s.order().begin() + s.position(),
                                   s.order().begin() + s.position() + g);
  const std::set<int64_t> slice_set(slice.begin(), slice.end());
  int64_t padding = 0;
  for (int r = 0; r < world; ++r) {
    const ElasticBatch& b = bs[size_t(r)];
    ASSERT_EQ(b.indices.size(), per) << "rank " << r;
    ASSERT_EQ(b.weights.size(), per) << "rank " << r;
    ASSERT_GE(b.indices.size(), 1u);
    EXPECT_EQ(b.global_count, g);
    bool seen_pad = false;
    for (size_t k = 0; k < per; ++k) {
      const float w = b.weights[k];
      ASSERT_TRUE(w == 0.0f || w == 1.0f) << w;
      EXPECT_TRUE(slice_set.count(b.indices[k])) << "index outside the step's slice";
      if (w == 1.0f) {
        EXPECT_FALSE(seen_pad) << "a real entry after padding";
        // The strided split: rank r, entry k is slice position r + k * world.
        EXPECT_EQ(b.indices[k], slice[size_t(r) + k * size_t(world)]);
        real.push_back(b.indices[k]);
      } else {
        seen_pad = true;
        ++padding;
      }
    }
  }
  EXPECT_EQ(int64_t(real.size()), g);
  EXPECT_EQ(sorted(real), sorted(slice));
  EXPECT_EQ(padding, int64_t(per) * world - g);
  if (padding > 0) EXPECT_EQ(g, s.remaining()) << "padding before the epoch's last step";
}

// Runs one epoch over a world that changes as `next_world` says, failing
// steps (batches computed on every rank, not advanced) as `fail` says;
// returns the committed real indices.
template <class NextWorld, class Fail>
std::vector<int64_t> run_epoch(ElasticSampler& s, NextWorld next_world, Fail fail,
                               int64_t* steps = nullptr, int64_t* failed = nullptr) {
  std::vector<int64_t> used;
  int64_t n_steps = 0, n_failed = 0;
  while (!s.epoch_done()) {
    const int world = next_world();
    const int64_t before = s.position();
    std::vector<ElasticBatch> bs = step_batches(s, world);
    check_step(s, world, bs);
    if (::testing::Test::HasFatalFailure()) return used;
    if (fail()) {
      ++n_failed;
      EXPECT_EQ(s.position(), before);
      continue;  // the next world redoes this step from the same position
    }
    const int64_t left = s.steps_left(world);
    EXPECT_GE(left, 1);
    for (const ElasticBatch& b : bs)
      for (size_t k = 0; k < b.indices.size(); ++k)
        if (b.weights[k] == 1.0f) used.push_back(b.indices[k]);
    s.advance(world);
    ++n_steps;
    EXPECT_EQ(s.position(), before + bs[0].global_count);
    EXPECT_EQ(s.steps_left(world), left - 1);
  }
  EXPECT_EQ(s.steps_left(1), 0);
  if (steps) *steps = n_steps;
  if (failed) *failed = n_failed;
  return used;
}

TEST(ElasticSampler, FixedWorldSequenceWithFailuresUsesEverySampleOnce) {
  // 4 -> 3 -> 3 -> 4 -> 2 (repeating), every third step fails once.
  const std::vector<int> worlds = {4, 3, 3, 4, 2};
  for (bool shuffle : {true, false}) {
    for (int64_t n : {1, 2, 7, 97, 1009}) {
      for (int64_t batch : {1, 3, 5}) {
        ElasticSampler s(n, batch, shuffle, /*seed=*/11);
        size_t w = 0;
        int tick = 0;
        std::vector<int64_t> used = run_epoch(
            s, [&] { return worlds[w++ % worlds.size()]; }, [&] { return ++tick % 3 == 0; });
        ASSERT_FALSE(HasFatalFailure());
        EXPECT_EQ(sorted(used), iota(n))
            << "n " << n << " batch " << batch << " shuffle " << shuffle;
        EXPECT_EQ(int64_t(used.size()), n);
      }
    }
  }
}

TEST(ElasticSampler, RandomWorldChangesAndFailuresOverManyEpochs) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 60; ++trial) {
    const bool shuffle = trial % 2 == 0;
    const int64_t n = 1 + int64_t(rng() % 500);  // mostly awkward sizes
    const int64_t batch = 1 + int64_t(rng() % 9);
    ElasticSampler s(n, batch, shuffle, rng());
    for (int64_t epoch : {0, 3}) {
      s.set_epoch(epoch);
      std::vector<int64_t> used = run_epoch(
          s, [&] { return 1 + int(rng() % 8); }, [&] { return rng() % 4 == 0; });
      ASSERT_FALSE(HasFatalFailure());
      ASSERT_EQ(sorted(used), iota(n)) << "trial " << trial << " n " << n << " batch " << batch;
      // Committed steps consume the order as a prefix: `used` is order()
      // permuted only within each step.
      EXPECT_EQ(sorted(used), sorted(s.order()));
    }
  }
}

TEST(ElasticSampler, PaddingOnlyInTheLastStep) {
  // n = 10, batch 3, world 4: one step of G = 10; ranks 2 and 3 are one short.
  ElasticSampler s(10, 3, /*shuffle=*/false);
  EXPECT_EQ(s.steps_left(4), 1);
  std::vector<ElasticBatch> bs = step_batches(s, 4);
  EXPECT_EQ(bs[0].indices, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(bs[1].indices, (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(bs[2].indices, (std::vector<int64_t>{2, 6, 0}));  // slice position 10 -> 10 mod 10
  EXPECT_EQ(bs[3].indices, (std::vector<int64_t>{3, 7, 1}));
  EXPECT_EQ(bs[0].weights, (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(bs[2].weights, (std::vector<float>{1, 1, 0}));
  EXPECT_EQ(bs[3].weights, (std::vector<float>{1, 1, 0}));
  for (const ElasticBatch& b : bs) EXPECT_EQ(b.global_count, 10);
  EXPECT_EQ(bs[0].local_count(), 3);
  EXPECT_EQ(bs[3].local_count(), 2);

  // One sample left for four ranks: nobody is empty, three pad with it.
  ElasticSampler one(9, 2, /*shuffle=*/false);
  one.advance(4);  // 8 of 9
  EXPECT_EQ(one.position(), 8);
  bs = step_batches(one, 4);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(bs[size_t(r)].indices, (std::vector<int64_t>{8})) << r;
    EXPECT_EQ(bs[size_t(r)].weights, (std::vector<float>{r == 0 ? 1.0f : 0.0f})) << r;
    EXPECT_EQ(bs[size_t(r)].global_count, 1);
  }
  one.advance(4);
  EXPECT_TRUE(one.epoch_done());

  // Full steps have no padding at all, also when the world changes.
  ElasticSampler full(24, 2, /*shuffle=*/true, 5);
  for (int world : {3, 4, 2}) {  // 6 + 8 + 4 = 18 of 24
    for (const ElasticBatch& b : step_batches(full, world)) {
      EXPECT_EQ(b.global_count, 2 * world);
      EXPECT_EQ(b.weights, (std::vector<float>{1, 1}));
    }
    full.advance(world);
  }
  EXPECT_EQ(full.position(), 18);
  EXPECT_EQ(full.steps_left(4), 1);  // 6 left, 8 a step
  EXPECT_EQ(full.steps_left(1), 3);
}

TEST(ElasticSampler, ConstantWorldMatchesDistributedSamplerShards) {
  // With a world that never changes and n a multiple of world * batch, rank
  // r's batches concatenated are DistributedSampler's shard of rank r.
  const int world = 4;
  const int64_t batch = 3, n = 96;
  for (bool shuffle : {true, false}) {
    ElasticSampler s(n, batch, shuffle, 7);
    s.set_epoch(2);
    std::vector<std::vector<int64_t>> seen(world);
    while (!s.epoch_done()) {
      for (int r = 0; r < world; ++r) {
        ElasticBatch b = s.batch(r, world);
        seen[size_t(r)].insert(seen[size_t(r)].end(), b.indices.begin(), b.indices.end());
      }
      s.advance(world);
    }
    for (int r = 0; r < world; ++r) {
      data::DistributedSampler d(n, world, r, shuffle, 7);
      d.set_epoch(2);
      EXPECT_EQ(seen[size_t(r)], d.indices()) << "rank " << r << " shuffle " << shuffle;
    }
  }
}

TEST(ElasticSampler, OrderIsAPureFunctionOfSeedEpochAndSize) {
  ElasticSampler a(1000, 4, true, 9), b(1000, 4, true, 9);
  EXPECT_EQ(a.order(), b.order());
  EXPECT_EQ(sorted(a.order()), iota(1000));
  EXPECT_NE(a.order(), iota(1000));
  // Note [Epoch shuffling]: the permutation of seed + epoch.
  EXPECT_EQ(a.order(), data::random_permutation(1000, 9));
  const std::vector<int64_t> e0 = a.order();
  a.set_epoch(1);
  EXPECT_NE(a.order(), e0);
  EXPECT_EQ(a.order(), data::random_permutation(1000, 10));
  b.set_epoch(1);
  EXPECT_EQ(a.order(), b.order());
  EXPECT_EQ(a.batch(2, 3).indices, b.batch(2, 3).indices);
  a.set_epoch(0);
  EXPECT_EQ(a.order(), e0);  // revisitable
  EXPECT_NE(ElasticSampler(1000, 4, true, 10).order(), e0);
  // Unshuffled: 0..n-1 in every epoch.
  ElasticSampler u(50, 4, false, 9);
  u.set_epoch(5);
  EXPECT_EQ(u.order(), iota(50));

  // set_epoch rewinds, also to the same epoch.
  a.advance(3);
  EXPECT_EQ(a.position(), 12);
  a.set_epoch(0);
  EXPECT_EQ(a.position(), 0);
  EXPECT_EQ(a.epoch(), 0);
}

TEST(ElasticSampler, StateDictRoundTripContinuesIdentically) {
  // A seed with the top bit set survives the i64 round trip.
  const uint64_t seed = std::numeric_limits<uint64_t>::max() - 12345;
  ElasticSampler a(517, 5, true, seed);
  a.set_epoch(3);
  for (int world : {4, 3, 3}) a.advance(world);
  const TensorDict state = a.state_dict();
  EXPECT_EQ(state.size(), 6u);
  EXPECT_EQ(state.at("position").item<int64_t>(), 50);
  EXPECT_EQ(state.at("epoch").dtype(), DType::i64);
  EXPECT_EQ(state.at("epoch").dim(), 0);

  ElasticSampler b(517, 5, true, seed);  // epoch 0, position 0: a new rank
  b.load_state_dict(state);
  EXPECT_EQ(b.epoch(), 3);
  EXPECT_EQ(b.position(), 50);
  EXPECT_EQ(b.order(), a.order());
  const std::vector<int> worlds = {4, 2, 5, 1, 3};
  size_t w = 0;
  while (!a.epoch_done()) {
    ASSERT_FALSE(b.epoch_done());
    const int world = worlds[w++ % worlds.size()];
    for (int r = 0; r < world; ++r) {
      ElasticBatch x = a.batch(r, world), y = b.batch(r, world);
      EXPECT_EQ(x.indices, y.indices);
      EXPECT_EQ(x.weights, y.weights);
      EXPECT_EQ(x.global_count, y.global_count);
    }
    a.advance(world);
    b.advance(world);
  }
  EXPECT_TRUE(b.epoch_done());

  // A state at the end of an epoch loads as done; other dtypes holding whole
  // numbers are accepted.
  ElasticSampler c(517, 5, true, seed);
  c.load_state_dict(a.state_dict());
  EXPECT_TRUE(c.epoch_done());
  TensorDict f = ElasticSampler(30, 2, false, 1).state_dict();
  f.set("position", Tensor::scalar(6.0, DType::f64));
  ElasticSampler d(30, 2, false, 1);
  d.load_state_dict(f);
  EXPECT_EQ(d.position(), 6);
}

TEST(ElasticSampler, MismatchedStateRaisesAndChangesNothing) {
  ElasticSampler src(100, 4, true, 3);
  src.set_epoch(2);
  src.advance(3);
  const TensorDict state = src.state_dict();

  auto check_unchanged = [](const ElasticSampler& s, const std::vector<int64_t>& order) {
    EXPECT_EQ(s.epoch(), 1);
    EXPECT_EQ(s.position(), 8);
    EXPECT_EQ(s.order(), order);
  };
  auto fresh = [](int64_t n, int64_t batch, bool shuffle, uint64_t seed) {
    ElasticSampler s(n, batch, shuffle, seed);
    s.set_epoch(1);
    s.advance(2);
    return s;
  };
  struct Case {
    ElasticSampler s;
    std::vector<std::string> parts;
  };
  std::vector<Case> cases = {
      {fresh(101, 4, true, 3), {"dataset_size mismatch", "100", "101"}},
      {fresh(100, 5, true, 3), {"batch_per_rank mismatch", "4", "5"}},
      {fresh(100, 4, true, 4), {"seed mismatch", "3", "4"}},
      {fresh(100, 4, false, 3), {"shuffle mismatch"}},
  };
  for (Case& c : cases) {
    const std::vector<int64_t> order = c.s.order();
    const int64_t pos = c.s.position();
    expect_error<ValueError>([&] { c.s.load_state_dict(state); }, c.parts);
    EXPECT_EQ(c.s.epoch(), 1);
    EXPECT_EQ(c.s.position(), pos);
    EXPECT_EQ(c.s.order(), order);
  }

  // Malformed states against a matching sampler.
  ElasticSampler s = fresh(100, 4, true, 3);
  const std::vector<int64_t> order = s.order();
  auto with = [&](const std::string& key, Tensor t) {
    TensorDict d = state;
    d.set(key, std::move(t));
    return d;
  };
  auto i64 = [](int64_t v) { return Tensor::from_vector<int64_t>({v}, {}); };
  TensorDict missing = state;
  missing.erase("position");
  expect_error<ValueError>([&] { s.load_state_dict(missing); }, {"missing key 'position'"});
  check_unchanged(s, order);
  expect_error<ValueError>([&] { s.load_state_dict(with("extra", i64(1))); },
                           {"unexpected key 'extra'"});
  check_unchanged(s, order);
  expect_error<ValueError>([&] { s.load_state_dict(with("position", i64(101))); },
                           {"'position' 101", "[0, 100]"});
  check_unchanged(s, order);
  expect_error<ValueError>([&] { s.load_state_dict(with("epoch", i64(-1))); }, {"'epoch' -1"});
  check_unchanged(s, order);
  expect_error<ValueError>(
      [&] {
        s.load_state_dict(with("epoch", Tensor::from_vector<int64_t>({1, 2}, {2})));
      },
      {"'epoch' must hold one integer"});
  check_unchanged(s, order);
  expect_error<ValueError>(
      [&] { s.load_state_dict(with("position", Tensor::scalar(2.5, DType::f64))); },
      {"'position' must hold one integer", "2.5"});
  check_unchanged(s, order);
  expect_error<ValueError>([&] { s.load_state_dict(with("shuffle", i64(2))); },
                           {"'shuffle' must be 0 or 1"});
  check_unchanged(s, order);
  expect_error<ValueError>([&] { s.load_state_dict(TensorDict{}); }, {"missing key 'epoch'"});
  check_unchanged(s, order);
}

TEST(ElasticSampler, LossScaleAveragesOverRealSamples) {
  // Per-sample "gradients" g_i = i^2; DDP's average of the ranks' weighted,
  // scaled sums must be the mean over the step's real samples.
  for (int world : {1, 3, 4, 7}) {
    ElasticSampler s(23, 3, true, 1);
    while (!s.epoch_done()) {
      double avg = 0, mean = 0;
      const std::vector<ElasticBatch> bs = step_batches(s, world);
      for (const ElasticBatch& b : bs) {
        double local = 0;
        for (size_t k = 0; k < b.indices.size(); ++k) {
          const double g = double(b.indices[k] * b.indices[k]);
          local += b.weights[k] * g;
          mean += b.weights[k] * g;
        }
        avg += data::elastic_loss_scale(b, world) * local / world;
      }
      mean /= double(bs[0].global_count);
      EXPECT_NEAR(avg, mean, 1e-5 * mean + 1e-6) << "world " << world;
      if (bs[0].global_count == 3 * world)
        EXPECT_FLOAT_EQ(data::elastic_loss_scale(bs[0], world), 1.0f / 3);  // the usual mean
      s.advance(world);
    }
  }
}

TEST(ElasticSampler, BadInputs) {
  expect_error<ValueError>([] { ElasticSampler(0, 1); }, {"ElasticSampler", "dataset_size 0 < 1"});
  expect_error<ValueError>([] { ElasticSampler(-5, 1); }, {"dataset_size -5 < 1"});
  expect_error<ValueError>([] { ElasticSampler(10, 0); }, {"batch_per_rank 0 < 1"});
  ElasticSampler s(10, 2, true, 0);
  expect_error<ValueError>([&] { s.set_epoch(-1); }, {"set_epoch", "epoch -1 < 0"});
  expect_error<ValueError>([&] { s.batch(0, 0); }, {"batch", "world 0 < 1"});
  expect_error<ValueError>([&] { s.batch(3, 3); }, {"rank 3 is not in [0, 3)"});
  expect_error<ValueError>([&] { s.batch(-1, 3); }, {"rank -1 is not in [0, 3)"});
  expect_error<ValueError>([&] { s.advance(0); }, {"world 0 < 1"});
  expect_error<ValueError>([&] { s.steps_left(-2); }, {"steps_left", "world -2 < 1"});
  EXPECT_EQ(s.position(), 0);
  s.advance(5);  // all 10
  EXPECT_TRUE(s.epoch_done());
  expect_error<ValueError>([&] { s.batch(0, 2); }, {"epoch 0 is done", "set_epoch"});
  expect_error<ValueError>([&] { s.advance(2); }, {"epoch 0 is done"});
  EXPECT_EQ(s.position(), 10);
  s.set_epoch(1);
  EXPECT_FALSE(s.epoch_done());
  expect_error<ValueError>([] { data::elastic_loss_scale(ElasticBatch{}, 2); },
                           {"elastic_loss_scale", "global_count 0 < 1"});
  ElasticBatch b;
  b.global_count = 4;
  expect_error<ValueError>([&] { data::elastic_loss_scale(b, 0); }, {"world 0 < 1"});
  // Large batch and world do not overflow: one step takes the rest.
  ElasticSampler big(10, std::numeric_limits<int64_t>::max() / 2);
  EXPECT_EQ(big.step_count(1000), 10);
  EXPECT_EQ(big.steps_left(1000), 1);
}

}  // namespace
}  // namespace ddp::test
