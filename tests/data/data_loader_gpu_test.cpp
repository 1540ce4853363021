// DataLoader delivering batches to a GPU: pinned host batches, the copy
// stream and the event the compute stream waits on. The GPU batches must
// equal the CPU loader's. Each test skips without a GPU.
#include <memory>

#include "data/data_test_util.h"
#include "ddp/data/data_loader.h"
#include "ddp/data/vision.h"
#include "ddp/tensor/cuda.h"

namespace ddp::test {
namespace {

using data::Batch;
using data::DataLoader;

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason()

std::vector<data::TransformPtr> augment() {
  return {std::make_shared<data::RandomCrop>(8, 2),
          std::make_shared<data::RandomHorizontalFlip>(0.5),
          std::make_shared<data::Normalize>(std::vector<float>{0.5f, 0.4f, 0.3f},
                                            std::vector<float>{0.2f, 0.3f, 0.4f})};
}

TEST(DataLoaderGpu, CudaBatchesEqualCpuBatches) {
  REQUIRE_GPU();
  auto ds = std::make_shared<data::SyntheticImageDataset>(50, Shape{3, 8, 8}, 10, 1);
  for (int workers : {0, 2}) {
    auto sampler = std::make_shared<data::RandomSampler>(50, 3);
    DataLoader cpu(ds, {.batch_size = 16, .num_workers = workers, .seed = 9}, sampler, augment());
    DataLoader gpu(ds,
                   {.batch_size = 16, .num_workers = workers, .seed = 9, .device = Device::cuda(0)},
                   sampler, augment());
    std::vector<Batch> want;
    for (const Batch& b : cpu) want.push_back(b);
    size_t k = 0;
    for (const Batch& b : gpu) {
      ASSERT_LT(k, want.size());
      EXPECT_TRUE(b.input.is_cuda());
      EXPECT_TRUE(b.target.is_cuda());
      EXPECT_EQ(b.input.shape(), want[k].input.shape());
      EXPECT_EQ(b.indices, want[k].indices);
      // Read on the compute stream, after the event the loader made it wait on.
      EXPECT_EQ(values_of<float>(b.input.cpu()), values_of<float>(want[k].input))
          << workers << " " << k;
      EXPECT_EQ(values_of<int64_t>(b.target.cpu()), values_of<int64_t>(want[k].target));
      ++k;
    }
    EXPECT_EQ(k, want.size());
  }
}

TEST(DataLoaderGpu, ComputeOnASideStreamWaitsForTheCopy) {
  REQUIRE_GPU();
  auto ds = std::make_shared<CountingDataset>(64, 64, 64);  // 16 KiB per example
  cuda::Stream side = cuda::Stream::create(0);
  {
    cuda::StreamGuard guard(side);
    DataLoader gpu(ds, {.batch_size = 16, .num_workers = 1, .device = Device::cuda(0)});
    int64_t first = 0;
    for (const Batch& b : gpu) {
      // Kernels queued on `side` (the current stream) see the copied data.
      Tensor doubled = b.input.clone();
      doubled.add_(b.input);
      std::vector<float> x = values_of<float>(doubled.cpu());
      for (int64_t i = 0; i < b.size(); ++i)
        EXPECT_EQ(x[size_t(i * 4096)], 2.0f * float(first + i));
      first += b.size();
    }
    EXPECT_EQ(first, 64);
  }
  side.synchronize();
  side.destroy();
}

TEST(DataLoaderGpu, PinMemoryGivesPinnedHostBatches) {
  REQUIRE_GPU();
  auto ds = std::make_shared<CountingDataset>(10);
  DataLoader pinned(ds, {.batch_size = 4, .num_workers = 1, .pin_memory = true});
  DataLoader plain(ds, {.batch_size = 4});
  std::vector<std::vector<float>> a, b;
  for (const Batch& x : pinned) {
    EXPECT_FALSE(x.input.is_cuda());
    a.push_back(values_of<float>(x.input));
  }
  for (const Batch& x : plain) b.push_back(values_of<float>(x.input));
  EXPECT_EQ(a, b);
}

TEST(DataLoaderGpu, DestroyingMidEpochWithCopiesInFlight) {
  REQUIRE_GPU();
  auto ds = std::make_shared<data::SyntheticImageDataset>(4096, Shape{3, 32, 32}, 10);
  for (int k = 0; k < 3; ++k) {
    DataLoader gpu(ds, {.batch_size = 128, .num_workers = 2, .device = Device::cuda(0)});
    gpu.start();
    ASSERT_TRUE(gpu.next().has_value());
    ASSERT_TRUE(gpu.next().has_value());
  }
  cuda::synchronize();
}

}  // namespace
}  // namespace ddp::test
