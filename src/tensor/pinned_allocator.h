#pragma once
// Internal: page-locked host memory for asynchronous copies (Note [Pinned
// staging buffers] in pinned_allocator_cuda.cpp). No CUDA types appear here;
// in a build without CUDA these raise DeviceError.

#include <cstddef>

#include "ddp/tensor/cuda.h"
#include "ddp/tensor/storage.h"

namespace ddp {

// The Storage is a CPU storage. Freed buffers are cached by (rounded) size
// and handed out again only after every event recorded with
// pinned_record_event has completed, so a copy still reading or writing the
// buffer is never overwritten.
Storage pinned_allocate(size_t nbytes);
// The allocator itself, in libddp_cuda.so; pinned_allocate (libddp.so)
// reaches it through the CUDA runtime (Note [Loading CUDA when first used]
// in src/tensor/cuda_runtime.h).
Storage cuda_pinned_allocate(size_t nbytes);
// `ptr` (the start of a pinned_allocate buffer) is used by work queued on
// `stream` now. Call it right after enqueuing the copy.
void pinned_record_event(void* ptr, cuda::Stream stream);
// Frees cached pinned buffers that are not in use (part of cuda_empty_cache).
void pinned_empty_cache();

}  // namespace ddp
