// The caching allocator's out-of-memory retry with blocks still awaiting
// events on other streams (label gpu; Note [Caching allocator] in
// caching_allocator_cuda.cpp: when cudaMalloc fails, it waits for pending
// events, returns whole free segments to the driver and tries once more).
//
// A block of 45% of the free memory is freed by the host while a side stream,
// kept busy by a queue of matrix products, has yet to read it
// (record_stream). Asking for another 70% then cannot be met from the cache
// (the block may not be reused yet) nor by cudaMalloc (too little left): the
// retry must wait for the side stream's event, release the block and succeed,
// and the side stream's late read must still see the old contents, not the
// new tensor's, which are written over the same memory right after.
#include <gtest/gtest.h>

#include <string>

#include "ddp/runtime_versions.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"

namespace ddp {
namespace {

constexpr int64_t kRow = 1024;

size_t free_gpu_bytes() {
  const RuntimeVersions v = runtime_versions();
  return v.gpus.empty() ? 0 : v.gpus[0].free_memory_bytes;
}

TEST(CudaAllocatorOomRetry, WaitsForOtherStreamsEventsThenReuses) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  cuda::empty_cache();
  const Device dev = Device::cuda(0);
  const size_t free0 = free_gpu_bytes();
  if (free0 < (size_t(4) << 30)) GTEST_SKIP() << "needs 4 GiB of free GPU memory";
  const int64_t rows_a = int64_t(free0 * 45 / 100) / (4 * kRow);
  const int64_t rows_b = int64_t(free0 * 70 / 100) / (4 * kRow);
  const TensorOptions f32 = TensorOptions(kFloat32).device(dev);

  cuda::Stream side = cuda::Stream::create(0);
  Tensor row_sums;  // written on the side stream, read at the end
  const cuda::MemoryStats before = cuda::memory_stats(0);
  {
    Tensor a = Tensor::full({rows_a, kRow}, 0.5, f32);  // default stream
    Tensor busy = randn({4096, 4096}, f32);
    cuda::synchronize();
    {
      cuda::StreamGuard on_side(side);
      // Tens of milliseconds of queued work, then the read of a.
      for (int i = 0; i < 40; ++i) busy = matmul(busy, busy) * (1.0 / 128.0);
      row_sums = sum(a, {1});  // 512 per row
      cuda::record_stream(a.storage().data(), side);
    }
    // a is freed here, its block awaiting the side stream's event.
  }
  // Too big for what cudaMalloc has left: only the retry can serve it.
  Tensor b = Tensor::full({rows_b, kRow}, 7.0, f32);
  const cuda::MemoryStats after = cuda::memory_stats(0);
  EXPECT_EQ(after.num_ooms, before.num_ooms) << "the retry should have served it";
  EXPECT_EQ(max(b).cpu().item<float>(), 7.0f);
  EXPECT_EQ(min(b).cpu().item<float>(), 7.0f);

  side.synchronize();
  cuda::synchronize();
  // Had a's memory gone to b before the side stream read it, rows would hold 7,168.
  EXPECT_EQ(max(row_sums).cpu().item<float>(), 512.0f);
  EXPECT_EQ(min(row_sums).cpu().item<float>(), 512.0f);
  b = Tensor();
  row_sums = Tensor();
  side.destroy();
  cuda::empty_cache();
}

}  // namespace
}  // namespace ddp
