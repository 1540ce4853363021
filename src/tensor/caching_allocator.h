#pragma once
// Internal: the CUDA caching allocator (Note [Caching allocator] in
// caching_allocator_cuda.cpp). No CUDA types appear here, so any .cpp may
// include it; in a build without CUDA every function exists and raises
// DeviceError (runtime_nocuda.cpp), so callers need no #if.

#include <cstddef>
#include <string>

#include "ddp/tensor/cuda.h"
#include "ddp/tensor/storage.h"

namespace ddp {

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

}  // namespace ddp
