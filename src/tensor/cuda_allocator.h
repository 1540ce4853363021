#pragma once
// Internal: the CUDA caching allocator, the pinned host allocator and a few
// runtime helpers shared by the CUDA sources. No CUDA types appear here (CUDA
// handles travel as void*), so any .cpp may include it. In a build without
// CUDA every function exists and raises DeviceError (cuda_runtime_nocuda.cpp),
// so callers need no #if.
//
// See Note [Caching allocator] in cuda_allocator_cuda.cpp and Note [Pinned
// staging buffers] in pinned_allocator_cuda.cpp.

#include <cstddef>
#include <string>

#include "ddp/core/error.h"  // fmt
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/storage.h"

namespace ddp {

// ---- device memory -----------------------------------------------------------
// nbytes on CUDA device `device` (0 <= device < cuda::device_count()). The
// block belongs to the current stream of that device (cuda::current_stream):
// once freed it is reused for work on that stream at once, and for other
// streams never (see cuda_record_stream). The Storage's deleter hands the block
// back to the cache. nbytes == 0 gives a Storage with a null pointer.
// Throws OutOfMemoryError when the device is full even after emptying the
// cache, DeviceError for a bad index or no usable GPU.
Storage cuda_allocate(size_t nbytes, int device);
// `ptr` (the start of a block from cuda_allocate, i.e. Storage::data()) is in
// use by work queued on `stream`: when it is freed it returns to the cache only
// after that work has finished. A null ptr is ignored.
void cuda_record_stream(void* ptr, cuda::Stream stream);
cuda::MemoryStats cuda_memory_stats(int device);
void cuda_reset_peak_memory_stats(int device);
std::string cuda_memory_summary(int device);
// Waits for pending stream events, then returns every cached block that is
// not in use (device and pinned) to the driver. Needs no GPU when nothing is
// cached.
void cuda_empty_cache();

// ---- pinned host memory -------------------------------------------------------
// Page-locked host memory for asynchronous copies. The Storage is a CPU
// storage. Freed buffers are cached by (rounded) size and handed out again only
// after every event recorded with pinned_record_event has completed, so a copy
// still reading or writing the buffer is never overwritten.
Storage pinned_allocate(size_t nbytes);
// `ptr` (the start of a pinned_allocate buffer) is used by work queued on
// `stream` now. Call it right after enqueuing the copy.
void pinned_record_event(void* ptr, cuda::Stream stream);
// Frees cached pinned buffers that are not in use (part of cuda_empty_cache).
void pinned_empty_cache();

// ---- helpers for the CUDA sources ----------------------------------------------
// RAII: makes `device` the calling thread's current CUDA device and restores the
// previous one. Does nothing when it already is. Throws CudaError/DeviceError.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int prev_ = -1;  // -1: nothing to restore
};

// Timing-disabled events of `device` from a per-device free list, for ordering
// work (the allocators use them; so may the backends). Returns a cudaEvent_t.
void* acquire_cuda_event(int device);
void release_cuda_event(int device, void* event);  // noexcept in practice: logs errors

// "1.50 MiB": for messages and summaries.
inline std::string format_bytes(size_t n) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024.0 && u < 6) v /= 1024.0, ++u;
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.2f} {}", v, kUnits[u]);
}

}  // namespace ddp
