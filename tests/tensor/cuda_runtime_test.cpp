// ddp::cuda runtime services. Runs everywhere: without a usable GPU (no device,
// an insufficient driver, or a build without CUDA) it checks that everything
// needing a GPU raises DeviceError instead of crashing or hanging; with one,
// it checks devices, streams, events and the memory statistics.

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <utility>

#include "ddp/core/error.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/storage.h"

namespace {

using ddp::DeviceError;
namespace cuda = ddp::cuda;

// Expects `stmt` to raise DeviceError saying that no usable device exists and why.
#define EXPECT_NO_DEVICE(stmt)                                                        \
  do {                                                                                \
    try {                                                                             \
      stmt;                                                                           \
      ADD_FAILURE() << #stmt " did not throw";                                        \
    } catch (const DeviceError& e) {                                                  \
      std::string msg = e.what();                                                     \
      EXPECT_NE(msg.find("no usable CUDA device"), std::string::npos) << msg;         \
      EXPECT_NE(msg.find(cuda::unavailable_reason()), std::string::npos) << msg;      \
    } catch (const std::exception& e) {                                               \
      ADD_FAILURE() << #stmt " threw something other than DeviceError: " << e.what(); \
    }                                                                                 \
  } while (0)

TEST(CudaRuntime, AvailabilityIsConsistent) {
  if (cuda::is_available()) {
    EXPECT_TRUE(cuda::is_compiled());
    EXPECT_GT(cuda::device_count(), 0);
    EXPECT_EQ(cuda::unavailable_reason(), "");
  } else {
    EXPECT_EQ(cuda::device_count(), 0);
    EXPECT_FALSE(cuda::unavailable_reason().empty());
  }
  if (!cuda::is_compiled()) {
    EXPECT_FALSE(cuda::is_available());
    EXPECT_EQ(cuda::unavailable_reason(), "libddp was built without CUDA");
  }
  // Asking again gives the same answer (decided once per process).
  EXPECT_EQ(cuda::device_count(), cuda::device_count());
}

TEST(CudaRuntime, WithoutGpuEverythingNeedingOneRaisesDeviceError) {
  if (cuda::is_available()) GTEST_SKIP() << "a usable GPU is present";
  EXPECT_NO_DEVICE(cuda::current_device());
  EXPECT_NO_DEVICE(cuda::set_device(0));
  EXPECT_NO_DEVICE(cuda::synchronize());
  EXPECT_NO_DEVICE(cuda::synchronize(0));
  EXPECT_NO_DEVICE(cuda::device_name(0));
  EXPECT_NO_DEVICE(cuda::Stream::create());
  EXPECT_NO_DEVICE(cuda::Stream::create(0, /*high_priority=*/true));
  EXPECT_NO_DEVICE(cuda::Stream().synchronize());
  EXPECT_NO_DEVICE(cuda::current_stream());
  EXPECT_NO_DEVICE(cuda::current_stream(0));
  EXPECT_NO_DEVICE(cuda::set_current_stream(cuda::Stream()));
  EXPECT_NO_DEVICE(cuda::StreamGuard guard{cuda::Stream{}});
  cuda::Event e;
  EXPECT_NO_DEVICE(e.record(cuda::Stream()));
  EXPECT_NO_DEVICE(cuda::memory_stats());
  EXPECT_NO_DEVICE(cuda::memory_stats(0));
  EXPECT_NO_DEVICE(cuda::reset_peak_memory_stats());
  EXPECT_NO_DEVICE(cuda::memory_summary());
  int x = 0;
  EXPECT_NO_DEVICE(cuda::record_stream(&x, cuda::Stream()));
}

TEST(CudaRuntime, WithoutGpuHarmlessCallsSucceed) {
  if (cuda::is_available()) GTEST_SKIP() << "a usable GPU is present";
  // Nothing can be cached, so there is nothing to empty.
  EXPECT_NO_THROW(cuda::empty_cache());
  // An event never recorded is complete.
  cuda::Event e;
  EXPECT_TRUE(e.query());
  EXPECT_NO_THROW(e.synchronize());
  EXPECT_NO_THROW(e.wait(cuda::Stream()));
  cuda::Event moved = std::move(e);
  EXPECT_TRUE(moved.query());
  // The default stream is never destroyed.
  cuda::Stream s;
  EXPECT_NO_THROW(s.destroy());
}

TEST(CudaRuntime, WithoutGpuCudaStorageRaisesDeviceError) {
  if (cuda::is_available()) GTEST_SKIP() << "a usable GPU is present";
  EXPECT_THROW(ddp::Storage::allocate(64, ddp::Device::cuda(0)), DeviceError);
}

// ---- with a GPU ---------------------------------------------------------------------

TEST(CudaRuntime, DeviceQueries) {
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason();
  int d = cuda::current_device();
  EXPECT_GE(d, 0);
  EXPECT_LT(d, cuda::device_count());
  EXPECT_NO_THROW(cuda::set_device(d));
  EXPECT_EQ(cuda::current_device(), d);
  EXPECT_FALSE(cuda::device_name(d).empty());
  EXPECT_NO_THROW(cuda::synchronize());
  EXPECT_THROW(cuda::set_device(cuda::device_count()), DeviceError);
  EXPECT_THROW(cuda::device_name(-2), DeviceError);
  EXPECT_THROW(cuda::memory_stats(cuda::device_count()), DeviceError);
}

TEST(CudaRuntime, CurrentStreamIsPerThreadAndGuarded) {
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason();
  const int d = cuda::current_device();
  EXPECT_EQ(cuda::current_stream().handle(), nullptr);  // the legacy default stream
  cuda::Stream s = cuda::Stream::create(d);
  cuda::Stream hi = cuda::Stream::create(d, /*high_priority=*/true);
  EXPECT_NE(s.handle(), nullptr);
  EXPECT_EQ(s.device(), d);
  EXPECT_FALSE(s == hi);
  {
    cuda::StreamGuard g(s);
    EXPECT_EQ(cuda::current_stream(d), s);
    {
      cuda::StreamGuard g2(hi);
      EXPECT_EQ(cuda::current_stream(d), hi);
    }
    EXPECT_EQ(cuda::current_stream(d), s);
    // Another thread still sees its own (default) stream.
    void* other = reinterpret_cast<void*>(1);
    std::thread([&] { other = cuda::current_stream(d).handle(); }).join();
    EXPECT_EQ(other, nullptr);
  }
  EXPECT_EQ(cuda::current_stream(d).handle(), nullptr);
  EXPECT_NO_THROW(s.synchronize());
  EXPECT_NO_THROW(cuda::Stream().synchronize());
  // Destroying the current stream resets this thread's current stream.
  cuda::set_current_stream(s);
  s.destroy();
  EXPECT_EQ(s.handle(), nullptr);
  EXPECT_EQ(cuda::current_stream(d).handle(), nullptr);
  hi.destroy();
}

TEST(CudaRuntime, EventsOrderAndTimeWork) {
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason();
  cuda::Stream s = cuda::Stream::create();
  cuda::Event start, stop;
  start.record(s);
  stop.record(s);
  stop.wait(cuda::current_stream());  // the default stream waits for s
  stop.synchronize();
  EXPECT_TRUE(stop.query());
  EXPECT_TRUE(start.query());
  EXPECT_GE(start.elapsed_ms(stop), 0.0f);
  cuda::Event never;
  EXPECT_THROW(start.elapsed_ms(never), ddp::ValueError);
  cuda::Event moved = std::move(stop);
  EXPECT_TRUE(moved.query());
  moved = std::move(start);
  EXPECT_TRUE(moved.query());
  cuda::synchronize();
  s.destroy();
}

TEST(CudaRuntime, MemoryStatsFollowStorages) {
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason();
  const int d = cuda::current_device();
  const size_t n = (size_t(1) << 20) + 1;  // rounds up to 1 MiB + 512 B
  cuda::MemoryStats before = cuda::memory_stats(d);
  {
    ddp::Storage s = ddp::Storage::allocate(n, ddp::Device::cuda(d));
    EXPECT_NE(s.data(), nullptr);
    EXPECT_EQ(s.nbytes(), n);
    cuda::MemoryStats during = cuda::memory_stats(d);
    EXPECT_EQ(during.allocated_bytes, before.allocated_bytes + n + 511);
    EXPECT_GE(during.reserved_bytes, during.allocated_bytes);
    EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
    EXPECT_EQ(during.num_allocs, before.num_allocs + 1);
  }
  cuda::MemoryStats after = cuda::memory_stats(d);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(after.peak_allocated_bytes, before.allocated_bytes + n);
  cuda::reset_peak_memory_stats(d);
  EXPECT_EQ(cuda::memory_stats(d).peak_allocated_bytes, after.allocated_bytes);
  std::string summary = cuda::memory_summary(d);
  EXPECT_NE(summary.find("allocated"), std::string::npos) << summary;
  EXPECT_NE(summary.find("reserved"), std::string::npos) << summary;
  cuda::empty_cache();
  EXPECT_LE(cuda::memory_stats(d).reserved_bytes, after.reserved_bytes);
}

}  // namespace
