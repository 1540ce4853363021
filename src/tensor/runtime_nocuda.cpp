// ddp/tensor/cuda.h and the allocator headers (caching_allocator.h, pinned_allocator.h, device_guard.h, cuda_event_pool.h) in a build without CUDA: no
// device is ever available, and everything that needs one raises DeviceError,
// so code written for GPUs fails with a clear message instead of a link error.

#include "ddp/tensor/cuda.h"

#include <string>

#include "ddp/core/error.h"
#include "tensor/caching_allocator.h"
#include "tensor/cuda_event_pool.h"
#include "tensor/device_guard.h"
#include "tensor/pinned_allocator.h"

namespace ddp {

namespace {
constexpr const char* kReason = "libddp was built without CUDA";

[[noreturn]] void no_cuda(const char* what) {
  DDP_THROW(DeviceError, "{}: no usable CUDA device: {}", what, kReason);
}
}  // namespace

// ---- internal (caching_allocator.h, pinned_allocator.h, device_guard.h, cuda_event_pool.h) ------------------------------------------------
Storage cuda_allocate(size_t, int) { no_cuda("cuda_allocate"); }
void cuda_record_stream(void*, cuda::Stream) { no_cuda("record_stream"); }
cuda::MemoryStats cuda_memory_stats(int) { no_cuda("memory_stats"); }
void cuda_reset_peak_memory_stats(int) { no_cuda("reset_peak_memory_stats"); }
std::string cuda_memory_summary(int) { no_cuda("memory_summary"); }
void cuda_empty_cache() {}  // nothing is ever cached
Storage pinned_allocate(size_t) { no_cuda("pinned_allocate"); }
void pinned_record_event(void*, cuda::Stream) { no_cuda("pinned_record_event"); }
void pinned_empty_cache() {}
CudaDeviceGuard::CudaDeviceGuard(int) { no_cuda("CudaDeviceGuard"); }
CudaDeviceGuard::~CudaDeviceGuard() = default;
void* acquire_cuda_event(int) { no_cuda("acquire_cuda_event"); }
void release_cuda_event(int, void*) {}

namespace cuda {

bool is_compiled() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return kReason; }
int current_device() { no_cuda("current_device"); }
void set_device(int) { no_cuda("set_device"); }
void synchronize(int) { no_cuda("synchronize"); }
std::string device_name(int) { no_cuda("device_name"); }

Stream Stream::create(int, bool) { no_cuda("Stream::create"); }
void Stream::destroy() {}  // only the default stream can exist: nothing to destroy
void Stream::synchronize() const { no_cuda("Stream::synchronize"); }
Stream current_stream(int) { no_cuda("current_stream"); }
void set_current_stream(const Stream&) { no_cuda("set_current_stream"); }
StreamGuard::StreamGuard(const Stream&) { no_cuda("StreamGuard"); }
StreamGuard::~StreamGuard() = default;

// Like the CUDA build: an event never recorded is complete, and needs no GPU
// to say so. None can be recorded here.
Event::Event() = default;
Event::~Event() = default;
Event::Event(Event&& o) noexcept : handle_(o.handle_), device_(o.device_) {}
Event& Event::operator=(Event&& o) noexcept {
  handle_ = o.handle_;
  device_ = o.device_;
  return *this;
}
void Event::record(const Stream&) { no_cuda("Event::record"); }
void Event::wait(const Stream&) const {}
bool Event::query() const { return true; }
void Event::synchronize() const {}
float Event::elapsed_ms(const Event&) const { no_cuda("Event::elapsed_ms"); }

MemoryStats memory_stats(int) { no_cuda("memory_stats"); }
void reset_peak_memory_stats(int) { no_cuda("reset_peak_memory_stats"); }
std::string memory_summary(int) { no_cuda("memory_summary"); }
void empty_cache() {}  // nothing is ever cached; see the CUDA build
void record_stream(void*, const Stream&) { no_cuda("record_stream"); }

}  // namespace cuda
}  // namespace ddp
