// DataLoader: sampler order and identical batches with 0, 1 and 3 workers,
// transforms in the workers, drop_last and short batches, epochs, bounded
// prefetch, shutdown mid-epoch, and worker exceptions reaching the consumer.
#include "ddp/data/data_loader.h"

#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>

#include "data/data_test_util.h"
#include "ddp/data/text.h"
#include "ddp/data/vision.h"
#include "ddp/tensor/cuda.h"

namespace ddp::test {
namespace {

using data::Batch;
using data::DataLoader;
using data::LoaderOptions;

struct Pass {
  std::vector<std::vector<int64_t>> indices;
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<int64_t>> targets;
};

Pass run(DataLoader& loader) {
  Pass p;
  for (const Batch& b : loader) {
    p.indices.push_back(b.indices);
    p.inputs.push_back(values_of<float>(b.input));
    p.targets.push_back(values_of<int64_t>(b.target));
  }
  return p;
}

std::vector<data::TransformPtr> augment() {
  return {std::make_shared<data::RandomCrop>(4, 2),
          std::make_shared<data::RandomHorizontalFlip>(0.5),
          std::make_shared<data::Normalize>(std::vector<float>{0.5f}, std::vector<float>{2.0f})};
}

TEST(DataLoader, BatchesFollowTheSamplerAndCollate) {
  auto ds = std::make_shared<CountingDataset>(10, 2, 3);
  DataLoader loader(ds, {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3);
  std::vector<Batch> batches;
  for (const Batch& b : loader) batches.push_back(b);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].input.shape(), (Shape{4, 1, 2, 3}));
  EXPECT_EQ(batches[0].target.shape(), (Shape{4}));
  EXPECT_EQ(batches[0].target.dtype(), kInt64);
  EXPECT_EQ(batches[2].size(), 2);  // the short last batch
  EXPECT_EQ(batches[2].indices, (std::vector<int64_t>{8, 9}));
  std::vector<float> x = values_of<float>(batches[1].input);
  EXPECT_EQ(x[0], 4.0f);                    // example 4, pixel 0
  EXPECT_EQ(x[6 + 5], 5.0f + 5 / 1000.0f);  // example 5, pixel 5
  EXPECT_EQ(values_of<int64_t>(batches[2].target), (std::vector<int64_t>{8, 9}));
  // drop_last drops the short batch.
  DataLoader dropping(ds, {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(dropping.size(), 2);
  EXPECT_EQ(run(dropping).indices.size(), 2u);
}

TEST(DataLoader, SameBatchesInSamplerOrderWithAnyNumberOfWorkers) {
  // Reads are slowed down a little so that workers finish out of order.
  auto ds = std::make_shared<CountingDataset>(37, 3, 3, -1, std::chrono::microseconds(200));
  std::vector<Pass> passes;
  for (int workers : {0, 1, 3}) {
    auto sampler = std::make_shared<data::RandomSampler>(ds->size(), 11);
    DataLoader loader(ds, {.batch_size = 5, .num_workers = workers, .seed = 4}, sampler, augment());
    loader.set_epoch(2);
    Pass p = run(loader);
    // Batches come out in the sampler's order.
    std::vector<int64_t> order;
    for (const auto& b : p.indices) order.insert(order.end(), b.begin(), b.end());
    EXPECT_EQ(order, sampler->indices()) << workers;
    passes.push_back(std::move(p));
  }
  EXPECT_EQ(passes[0].indices.size(), 8u);
  for (size_t k = 1; k < passes.size(); ++k) {
    EXPECT_EQ(passes[k].indices, passes[0].indices);
    EXPECT_EQ(passes[k].inputs, passes[0].inputs) << "workers differ in pass " << k;
    EXPECT_EQ(passes[k].targets, passes[0].targets);
  }
}

TEST(DataLoader, TransformsRunPerExampleAndRedrawEachEpoch) {
  auto ds = std::make_shared<CountingDataset>(8, 3, 3);
  DataLoader loader(ds, {.batch_size = 8, .num_workers = 1, .seed = 1}, nullptr, augment());
  EXPECT_EQ(loader.input_shape(), (Shape{1, 4, 4}));
  Pass e0 = run(loader);
  Pass again = run(loader);
  loader.set_epoch(1);
  Pass e1 = run(loader);
  ASSERT_EQ(e0.inputs.size(), 1u);
  EXPECT_EQ(e0.inputs, again.inputs);  // the same epoch repeats exactly
  EXPECT_NE(e0.inputs, e1.inputs);     // a new epoch draws new crops/flips
  EXPECT_EQ(e0.indices, e1.indices);   // unshuffled order stays
  // Each row is the normalized crop of its example: values (v - 0.5) / 2
  // with v the example's pixels or the zero padding.
  const std::vector<float>& x = e0.inputs[0];
  ASSERT_EQ(x.size(), 8u * 16u);
  for (int64_t i = 0; i < 8; ++i)
    for (int p = 0; p < 16; ++p) {
      const float v = x[size_t(i * 16 + p)] * 2.0f + 0.5f;
      EXPECT_TRUE(v == 0.0f || std::abs(v - float(i)) < 0.01f) << i << " " << v;
    }
  // Matches a single example transformed by hand with the same stream.
  std::vector<float> in = values_of<float>(ds->get(3).input), a(16), b(16), out(16);
  data::SampleRng rng(1, 0, 3);
  auto t = augment();
  t[0]->apply(in.data(), {1, 3, 3}, a.data(), rng);
  t[1]->apply(a.data(), {1, 4, 4}, b.data(), rng);
  t[2]->apply(b.data(), {1, 4, 4}, out.data(), rng);
  EXPECT_EQ(std::vector<float>(x.begin() + 3 * 16, x.begin() + 4 * 16), out);
}

TEST(DataLoader, ShuffleAndDistributedSamplerReshufflePerEpoch) {
  auto ds = std::make_shared<CountingDataset>(20);
  DataLoader loader(ds, {.batch_size = 20, .shuffle = true, .seed = 3});
  std::vector<int64_t> e0 = run(loader).indices[0];
  loader.set_epoch(1);
  std::vector<int64_t> e1 = run(loader).indices[0];
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, data::RandomSampler(20, 3).indices());

  auto s = std::make_shared<data::DistributedSampler>(20, 2, 1, true, 5);
  DataLoader shard(ds, {.batch_size = 4, .num_workers = 2}, s);
  EXPECT_EQ(shard.size(), 3);  // 10 indices per rank
  shard.set_epoch(4);
  EXPECT_EQ(s->epoch(), 4);
  Pass p = run(shard);
  std::vector<int64_t> order;
  for (const auto& b : p.indices) order.insert(order.end(), b.begin(), b.end());
  EXPECT_EQ(order, s->indices());
}

TEST(DataLoader, PrefetchIsBounded) {
  auto ds = std::make_shared<CountingDataset>(400);
  DataLoader loader(ds, {.batch_size = 4, .num_workers = 2, .prefetch_factor = 2});
  loader.start();
  ASSERT_TRUE(loader.next().has_value());
  // Give the workers time to run ahead as far as they may.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // One batch consumed plus at most 2 * 2 claimed ahead, 4 examples each.
  EXPECT_LE(ds->reads.load(), (1 + 4) * 4);
  EXPECT_GE(ds->reads.load(), 2 * 4);
}

TEST(DataLoader, DestroyingMidEpochStopsPromptly) {
  for (int workers : {1, 3}) {
    auto ds = std::make_shared<CountingDataset>(10000, 2, 3, -1, std::chrono::microseconds(500));
    const auto t0 = std::chrono::steady_clock::now();
    {
      DataLoader loader(ds, {.batch_size = 8, .num_workers = workers});
      loader.start();
      ASSERT_TRUE(loader.next().has_value());
      ASSERT_TRUE(loader.next().has_value());
    }  // destroyed with a whole epoch left
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 2.0) << workers;  // the full epoch would take 5 s / workers
    EXPECT_LT(ds->reads.load(), 500);
  }
}

TEST(DataLoader, BatchBuffersAreReusedOnlyAfterRelease) {
  auto ds = std::make_shared<CountingDataset>(12);
  DataLoader loader(ds, {.batch_size = 4});
  loader.start();
  std::optional<Batch> b0 = loader.next();
  const void* p0 = b0->input.data_ptr();
  std::optional<Batch> b1 = loader.next();
  EXPECT_NE(b1->input.data_ptr(), p0);  // b0 is still held
  b0.reset();
  std::optional<Batch> b2 = loader.next();
  EXPECT_EQ(b2->input.data_ptr(), p0);  // b0's buffer, refilled
  EXPECT_EQ(b2->indices, (std::vector<int64_t>{8, 9, 10, 11}));
  EXPECT_EQ(values_of<float>(b2->input)[0], 8.0f);
  EXPECT_EQ(values_of<float>(b1->input)[0], 4.0f);
  // A batch may outlive its loader.
  std::optional<Batch> kept;
  {
    DataLoader short_lived(ds, {.batch_size = 2, .num_workers = 1});
    short_lived.start();
    kept = short_lived.next();
  }
  EXPECT_EQ(values_of<int64_t>(kept->target), (std::vector<int64_t>{0, 1}));
}

TEST(DataLoader, RestartingAPassAbandonsTheOldOne) {
  auto ds = std::make_shared<CountingDataset>(40, 2, 3, -1, std::chrono::microseconds(100));
  DataLoader loader(ds, {.batch_size = 4, .num_workers = 2});
  loader.start();
  ASSERT_TRUE(loader.next().has_value());
  Pass full = run(loader);  // begin() starts over
  ASSERT_EQ(full.indices.size(), 10u);
  EXPECT_EQ(full.indices[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_FALSE(loader.next().has_value());  // the pass is over
  DataLoader idle(ds, {.batch_size = 4});
  EXPECT_FALSE(idle.next().has_value());  // no pass started
}

TEST(DataLoader, WorkerExceptionReachesTheConsumer) {
  for (int workers : {0, 1, 3}) {
    auto ds = std::make_shared<CountingDataset>(30, 2, 3, /*fail_at=*/13);
    DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    loader.start();
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(loader.next().has_value()) << workers;  // rows 0..11
    // Batch 3 holds example 13: its error, type and message unchanged.
    expect_error<IoError>([&] { loader.next(); }, {"corrupt record 13"});
    EXPECT_FALSE(loader.next().has_value()) << "the pass ends at the error";
    // A new pass starts over from the first batch.
    loader.start();
    std::optional<Batch> first = loader.next();
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->indices, (std::vector<int64_t>{0, 1, 2, 3}));
  }
}

TEST(DataLoader, BadSamplerIndexIsAnIndexError) {
  struct Past final : data::Sampler {
    int64_t size() const override { return 2; }
    std::vector<int64_t> indices() const override { return {0, 99}; }
  };
  DataLoader loader(std::make_shared<CountingDataset>(5), {.batch_size = 2, .num_workers = 1},
                    std::make_shared<Past>());
  loader.start();
  expect_error<IndexError>([&] { loader.next(); }, {"CountingDataset", "index 99"});
}

TEST(DataLoader, BadOptions) {
  auto ds = std::make_shared<CountingDataset>(5);
  EXPECT_THROW(DataLoader(ds, {.batch_size = 0}), ValueError);
  EXPECT_THROW(DataLoader(ds, {.num_workers = -1}), ValueError);
  EXPECT_THROW(DataLoader(ds, {.prefetch_factor = 0}), ValueError);
  EXPECT_THROW(DataLoader(nullptr, {}), ValueError);
  // Transforms that do not fit the examples are refused up front.
  std::vector<data::TransformPtr> big{std::make_shared<data::RandomCrop>(8)};
  expect_error<ShapeError>([&] { DataLoader(ds, {}, nullptr, big); }, {"RandomCrop"});
  auto images = std::make_shared<data::SyntheticImageDataset>(2, Shape{1, 2, 2});
  EXPECT_NO_THROW(DataLoader(images, {}, nullptr, augment()));
  // Transforms need f32 inputs.
  auto bytes = std::make_shared<data::SyntheticTokenDataset>(2, 4, 10);
  expect_error<DTypeError>([&] { DataLoader(bytes, {}, nullptr, augment()); }, {"f32"});
  if (!cuda::is_available()) {
    EXPECT_THROW(DataLoader(ds, {.device = Device::cuda(0)}), DeviceError);
    EXPECT_THROW(DataLoader(ds, {.pin_memory = true}), DeviceError);
  }
}

TEST(DataLoader, CollateHelperMatchesTheLoader) {
  auto ds = std::make_shared<CountingDataset>(6);
  std::vector<int64_t> idx{5, 0, 3};
  data::Example e = data::collate(*ds, idx);
  EXPECT_EQ(e.input.shape(), (Shape{3, 1, 2, 3}));
  EXPECT_EQ(values_of<int64_t>(e.target), (std::vector<int64_t>{5, 0, 3}));
  EXPECT_EQ(values_of<float>(e.input)[6], 0.0f);
}

}  // namespace
}  // namespace ddp::test
