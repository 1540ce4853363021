// ddp/tensor/cuda.h and the allocator headers (caching_allocator.h, pinned_allocator.h, device_guard.h, cuda_event_pool.h) in a build without CUDA: no
// device is ever available, and everything that needs one raises DeviceError,
// so code written for GPUs fails with a clear message instead of a link error.

#include "ddp/tensor/cuda.h"

#include <string>

#include "ddp/core/error.h"
#include "core/cuda_library.h"
#include "tensor/caching_allocator.h"
#include "tensor/cuda_event_pool.h"
#include "tensor/device_guard.h"
#include "tensor/pinned_allocator.h"

namespace ddp {

namespace {
constexpr const char* kReason = detail::kBuiltWithoutCuda;

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
void pinned_record_event(void*, cuda::Stream) { no_cuda("pinned_record_event"); }
void pinned_empty_cache() {}
CudaDeviceGuard::CudaDeviceGuard(int) { no_cuda("CudaDeviceGuard"); }
CudaDeviceGuard::~CudaDeviceGuard() = default;
void* acquire_cuda_event(int) { no_cuda("acquire_cuda_event"); }
void release_cuda_event(int, void*) {}

}  // namespace ddp
