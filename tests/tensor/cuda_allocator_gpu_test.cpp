// The CUDA caching allocator and the pinned host allocator (internal
// interfaces in src/tensor/: caching_allocator.h, pinned_allocator.h,
// device_guard.h, cuda_event_pool.h). Every test needs a GPU and skips
// without one. Tests look at differences of the statistics and start from
// empty_cache(), so they do not depend on each other's leftovers.

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../../src/core/format_bytes.h"
#include "../../src/tensor/caching_allocator.h"
#include "../../src/tensor/pinned_allocator.h"
#include "ddp/core/error.h"
#include "ddp/tensor/cuda.h"

namespace {

using ddp::cuda_allocate;
using ddp::Storage;
namespace cuda = ddp::cuda;

constexpr size_t kMiB = size_t(1) << 20;

cuda::MemoryStats stats() { return cuda::memory_stats(0); }

// Holds a stream back until release(): enqueues a host function that waits
// for a flag, so a test can tell "not reused while the stream may still use
// it" from "reused after". cudaLaunchHostFunc comes from the libcudart that
// libddp already loaded (the tests do not link CUDA themselves). The state is
// shared with the callback, so the gate may go away before the callback runs.
class StreamGate {
 public:
  explicit StreamGate(const cuda::Stream& s) : state_(std::make_shared<State>()) {
    using LaunchHostFunc = int (*)(void* stream, void (*fn)(void*), void* data);
    auto launch = reinterpret_cast<LaunchHostFunc>(dlsym(RTLD_DEFAULT, "cudaLaunchHostFunc"));
    if (!launch) throw std::runtime_error("cudaLaunchHostFunc not found in the process");
    auto* arg = new std::shared_ptr<State>(state_);
    if (launch(s.handle(), &StreamGate::hold, arg) != 0) {
      delete arg;
      throw std::runtime_error("cudaLaunchHostFunc failed");
    }
  }
  ~StreamGate() { release(); }
  void release() { state_->open.store(true); }

 private:
  struct State {
    std::atomic<bool> open{false};
  };
  static void hold(void* arg) {
    std::unique_ptr<std::shared_ptr<State>> state(static_cast<std::shared_ptr<State>*>(arg));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!(*state)->open.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::shared_ptr<State> state_;
};

TEST(CudaAllocator, ReusesFreedBlocksWithoutCudaMalloc) {
  if (!ddp::cuda::is_available()) GTEST_SKIP() << ddp::cuda::unavailable_reason();
  cuda::empty_cache();
  const std::vector<size_t> sizes = {1, 1000, 4096, 300 << 10, 3 * kMiB, 30 * kMiB};
  auto round = [&] {
    std::vector<Storage> live;
    for (size_t n : sizes) {
      live.push_back(cuda_allocate(n, 0));
      EXPECT_NE(live.back().data(), nullptr);
      EXPECT_EQ(live.back().nbytes(), n);
      EXPECT_EQ(live.back().device(), ddp::Device::cuda(0));
    }
  };
  round();
  cuda::MemoryStats warm = stats();
  round();
  cuda::MemoryStats again = stats();
  EXPECT_EQ(again.num_cuda_mallocs, warm.num_cuda_mallocs);
  EXPECT_EQ(again.num_allocs, warm.num_allocs + sizes.size());
  EXPECT_EQ(again.reserved_bytes, warm.reserved_bytes);
  EXPECT_EQ(again.allocated_bytes, warm.allocated_bytes);

  // A freed block goes straight back to the next request of its stream.
  void* p = cuda_allocate(4096, 0).data();
  Storage q = cuda_allocate(4096, 0);
  EXPECT_EQ(q.data(), p);

  Storage empty = cuda_allocate(0, 0);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.nbytes(), 0u);
}

TEST(CudaAllocator, SplitsSegmentsAndMergesOnFree) {
  if (!ddp::cuda::is_available()) GTEST_SKIP() << ddp::cuda::unavailable_reason();
  cuda::empty_cache();
  cuda::MemoryStats s0 = stats();
  Storage a = cuda_allocate(1000, 0);
  Storage b = cuda_allocate(1000, 0);
  cuda::MemoryStats s1 = stats();
  // One 2 MiB small segment serves both, b right after a (1000 -> 1024 B).
  EXPECT_EQ(s1.num_cuda_mallocs, s0.num_cuda_mallocs + 1);
  EXPECT_EQ(s1.reserved_bytes, s0.reserved_bytes + 2 * kMiB);
  EXPECT_EQ(s1.allocated_bytes, s0.allocated_bytes + 2048);
  EXPECT_EQ(static_cast<char*>(b.data()), static_cast<char*>(a.data()) + 1024);

  // Large pool: one 20 MiB segment serves two 5 MiB tensors.
  Storage c = cuda_allocate(5 * kMiB, 0);
  Storage d = cuda_allocate(5 * kMiB, 0);
  cuda::MemoryStats s2 = stats();
  EXPECT_EQ(s2.num_cuda_mallocs, s1.num_cuda_mallocs + 1);
  EXPECT_EQ(s2.reserved_bytes, s1.reserved_bytes + 20 * kMiB);
  EXPECT_EQ(static_cast<char*>(d.data()), static_cast<char*>(c.data()) + 5 * kMiB);

  // Freed in an order that needs merging both ways; only whole segments can
  // be returned, so empty_cache() giving everything back proves the merge.
  b = Storage();
  a = Storage();
  c = Storage();
  d = Storage();
  cuda::empty_cache();
  EXPECT_EQ(stats().reserved_bytes, s0.reserved_bytes);
}

TEST(CudaAllocator, TracksPeaks) {
  if (!ddp::cuda::is_available()) GTEST_SKIP() << ddp::cuda::unavailable_reason();
  cuda::empty_cache();
  cuda::reset_peak_memory_stats(0);
  cuda::MemoryStats base = stats();
  EXPECT_EQ(base.peak_allocated_bytes, base.allocated_bytes);
  EXPECT_EQ(base.peak_reserved_bytes, base.reserved_bytes);
  {
    Storage s = cuda_allocate(8 * kMiB, 0);
    cuda::MemoryStats mid = stats();
    EXPECT_EQ(mid.allocated_bytes, base.allocated_bytes + 8 * kMiB);
    EXPECT_EQ(mid.reserved_bytes, base.reserved_bytes + 20 * kMiB);
  }
  cuda::MemoryStats after = stats();
  EXPECT_EQ(after.allocated_bytes, base.allocated_bytes);
  EXPECT_EQ(after.reserved_bytes, base.reserved_bytes + 20 * kMiB);  // cached
  EXPECT_EQ(after.peak_allocated_bytes, base.allocated_bytes + 8 * kMiB);
  EXPECT_EQ(after.peak_reserved_bytes, base.reserved_bytes + 20 * kMiB);
  cuda::empty_cache();
  EXPECT_EQ(stats().peak_reserved_bytes, after.peak_reserved_bytes);  // peaks stay
  cuda::reset_peak_memory_stats(0);
  cuda::MemoryStats reset = stats();
  EXPECT_EQ(reset.peak_allocated_bytes, reset.allocated_bytes);
  EXPECT_EQ(reset.peak_reserved_bytes, reset.reserved_bytes);
}

TEST(CudaAllocator, OutOfMemoryErrorSaysWhatWasAskedAndWhatIsHeld) {
  if (!ddp::cuda::is_available()) GTEST_SKIP() << ddp::cuda::unavailable_reason();
  constexpr size_t kPiB = size_t(1) << 50;
  Storage held = cuda_allocate(3 * kMiB, 0);  // so "allocated" is not zero
  cuda::MemoryStats before = stats();
  try {
    Storage s = cuda_allocate(kPiB, 0);
    FAIL() << "allocating 1 PiB succeeded";
  } catch (const ddp::OutOfMemoryError& e) {
    std::string msg = e.what();
    for (const std::string& part :
         {std::string("out of memory"), std::string("1.00 PiB"), std::to_string(kPiB),
          std::string("cuda:0"), std::string("total"), std::string("free"),
          std::string("allocated"), std::string("reserved"),
          ddp::format_bytes(before.allocated_bytes)})
      EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;
  }
  EXPECT_EQ(stats().num_ooms, before.num_ooms + 1);
  // OutOfMemoryError is a CudaError, and the allocator still works afterwards.
  EXPECT_THROW(cuda_allocate(kPiB, 0), ddp::CudaError);
  Storage ok = cuda_allocate(kMiB, 0);
  EXPECT_NE(ok.data(), nullptr);
}

TEST(CudaAllocator, RecordStreamDelaysReuseUntilTheStreamIsDone) {
  if (!ddp::cuda::is_available()) GTEST_SKIP() << ddp::cuda::unavailable_reason();
  cuda::empty_cache();
  cuda::Stream side = cuda::Stream::create(0);
  Storage a = cuda_allocate(4096, 0);  // default stream; a fresh 2 MiB segment
  void* p = a.data();
  const uint64_t mallocs = stats().num_cuda_mallocs;
  {
    StreamGate gate(side);  // side cannot pass this point yet
    cuda::record_stream(p, side);
    a = Storage();  // freed, but side may still be using it
    EXPECT_NE(cuda::memory_summary(0).find("awaiting events"), std::string::npos);
    Storage b = cuda_allocate(4096, 0);
    EXPECT_NE(b.data(), p) << "block reused while another stream may still use it";
    gate.release();
    side.synchronize();
    Storage c = cuda_allocate(4096, 0);  // the event has completed: p is free again
    EXPECT_EQ(c.data(), p);
  }
  EXPECT_EQ(stats().num_cuda_mallocs, mallocs);

  // Recording the block's own stream changes nothing: reuse is immediate.
  Storage own = cuda_allocate(4096, 0);
  void* q = own.data();
  cuda::record_stream(q, cuda::current_stream(0));
  own = Storage();
  EXPECT_EQ(cuda_allocate(4096, 0).data(), q);

  // Only pointers from the allocator are accepted; null is ignored.
  int x = 0;
  EXPECT_THROW(cuda::record_stream(&x, side), ddp::ValueError);
  EXPECT_NO_THROW(cuda::record_stream(nullptr, side));
  side.synchronize();
  side.destroy();
}

TEST(CudaAllocator, BlocksBelongToTheCurrentStream) {
  if (!ddp::cuda::is_available()) GTEST_SKIP() << ddp::cuda::unavailable_reason();
  cuda::empty_cache();
  cuda::Stream side = cuda::Stream::create(0);
  void* p = cuda_allocate(4096, 0).data();  // freed at once, cached for the default stream
  {
    cuda::StreamGuard g(side);
    Storage s = cuda_allocate(4096, 0);
    EXPECT_NE(s.data(), p) << "a block of the default stream went to another stream";
  }
  EXPECT_EQ(cuda_allocate(4096, 0).data(), p);
  side.synchronize();
  side.destroy();
}

TEST(CudaAllocator, EmptyCacheLowersReserved) {
  if (!ddp::cuda::is_available()) GTEST_SKIP() << ddp::cuda::unavailable_reason();
  { Storage s = cuda_allocate(30 * kMiB, 0); }
  cuda::MemoryStats before = stats();
  EXPECT_GE(before.reserved_bytes, 30 * kMiB);
  cuda::empty_cache();
  cuda::MemoryStats after = stats();
  EXPECT_LE(after.reserved_bytes, before.reserved_bytes - 30 * kMiB);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  // Live blocks survive empty_cache().
  Storage live = cuda_allocate(kMiB, 0);
  cuda::empty_cache();
  EXPECT_GE(stats().reserved_bytes, kMiB);
}

TEST(CudaAllocator, MemorySummaryIsATable) {
  if (!ddp::cuda::is_available()) GTEST_SKIP() << ddp::cuda::unavailable_reason();
  Storage s = cuda_allocate(kMiB, 0);
  std::string summary = cuda::memory_summary(0);
  EXPECT_FALSE(summary.empty());
  for (const char* part : {"cuda:0", "allocated", "reserved", "peak", "cudaMalloc"})
    EXPECT_NE(summary.find(part), std::string::npos) << "missing '" << part << "' in:\n" << summary;
}

TEST(CudaPinned, ReusesBuffersOnlyAfterTheirEventsComplete) {
  if (!ddp::cuda::is_available()) GTEST_SKIP() << ddp::cuda::unavailable_reason();
  Storage h = ddp::pinned_allocate(1000);
  ASSERT_NE(h.data(), nullptr);
  EXPECT_TRUE(h.device().is_cpu());
  EXPECT_EQ(h.nbytes(), 1000u);
  std::memset(h.data(), 7, 1000);  // plain host memory
  void* p = h.data();
  h = Storage();
  Storage h2 = ddp::pinned_allocate(900);  // same size class (1 KiB): the same buffer
  EXPECT_EQ(h2.data(), p);

  // A second free buffer of the class, so the gated part needs no cudaHostAlloc.
  void* other = ddp::pinned_allocate(1000).data();
  EXPECT_NE(other, p);
  cuda::Stream side = cuda::Stream::create(0);
  {
    StreamGate gate(side);
    ddp::pinned_record_event(h2.data(), side);  // a copy on side still reads it
    h2 = Storage();
    Storage h3 = ddp::pinned_allocate(1000);
    EXPECT_EQ(h3.data(), other) << "pinned buffer reused while a stream may still use it";
    gate.release();
    side.synchronize();
    Storage h4 = ddp::pinned_allocate(1000);
    EXPECT_EQ(h4.data(), p);
  }
  int x = 0;
  EXPECT_THROW(ddp::pinned_record_event(&x, side), ddp::ValueError);
  EXPECT_EQ(ddp::pinned_allocate(0).data(), nullptr);
  cuda::empty_cache();  // also frees the cached pinned buffers
  side.destroy();
}

}  // namespace
