// Pinned (page-locked) host memory for asynchronous host<->device copies.
// See Note [Pinned staging buffers].

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/tensor/cuda.h"
#include "core/format_bytes.h"
#include "tensor/cuda_event_pool.h"
#include "tensor/device_guard.h"
#include "tensor/pinned_allocator.h"
#include "tensor/cuda_pending_events.h"

namespace ddp {

// Note [Pinned staging buffers]
// cudaMemcpyAsync is only asynchronous from page-locked memory, and
// cudaHostAlloc/cudaFreeHost are slow (they map pages for every device and
// cudaFreeHost synchronises), so the CUDA backend stages non-blocking copies
// through buffers cached here. Sizes are rounded up to a power of two (at
// least 512 B) so that the varying sizes of a training loop share few size
// classes; a request takes a free buffer of exactly its class. The memory is
// allocated portable (usable by every device's context).
//
// A staging buffer is freed by the host right after the copy is queued, while
// the copy may still run. The backend therefore calls pinned_record_event()
// after queuing each copy, and a freed buffer is handed out again only once
// all its events have completed (polled on the next pinned_allocate). One
// process-wide cache, leaked on purpose: see Note [Leaked singletons] in
// caching_allocator_cuda.cpp.
namespace {

struct PinnedBlock {
  void* ptr = nullptr;
  size_t size = 0;
  bool in_use = false;
  int pending_events = 0;
};

class PinnedAllocator {
 public:
  PinnedBlock* allocate(size_t nbytes) {
    if (nbytes > (size_t(1) << 62))
      DDP_THROW(OutOfMemoryError, "pinned host memory: cannot allocate {} bytes", nbytes);
    const size_t size = std::bit_ceil(std::max(nbytes, size_t(512)));
    std::lock_guard<std::mutex> g(mu_);
    process_events(/*wait=*/false);
    auto it = free_.lower_bound({size, nullptr});
    if (it != free_.end() && it->first == size) {
      PinnedBlock* b = blocks_.at(it->second);
      free_.erase(it);
      b->in_use = true;
      return b;
    }
    void* ptr = nullptr;
    cudaError_t err = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached();
      err = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      if (err == cudaErrorMemoryAllocation)
        DDP_THROW(OutOfMemoryError,
                  "pinned host memory exhausted: tried to allocate {} ({} bytes, rounded to {}); "
                  "the pinned cache holds {} (cached buffers were already freed before retrying)",
                  format_bytes(nbytes), nbytes, format_bytes(size), format_bytes(reserved_));
      DDP_THROW(CudaError, "cudaHostAlloc of {} failed: {}: {}", format_bytes(size),
                cudaGetErrorName(err), cudaGetErrorString(err));
    }
    auto* b = new PinnedBlock;
    b->ptr = ptr;
    b->size = size;
    b->in_use = true;
    blocks_.emplace(ptr, b);
    reserved_ += size;
    return b;
  }

  void free(PinnedBlock* b) noexcept {
    std::lock_guard<std::mutex> g(mu_);
    b->in_use = false;
    if (b->pending_events == 0) free_.insert({b->size, b->ptr});
  }

  void record_event(void* ptr, const cuda::Stream& s) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = blocks_.find(ptr);
    DDP_CHECK(it != blocks_.end() && it->second->in_use,
              "pinned_record_event: {} is not the start of a live pinned buffer", ptr);
    CudaDeviceGuard guard(s.device());  // the legacy stream (nullptr) is the current device's
    auto ev = static_cast<cudaEvent_t>(acquire_cuda_event(s.device()));
    cudaError_t err = cudaEventRecord(ev, static_cast<cudaStream_t>(s.handle()));
    if (err != cudaSuccess) {
      release_cuda_event(s.device(), ev);
      DDP_CUDA_CHECK(err);
    }
    pending_.push_back({ev, s.device(), it->second});
    ++it->second->pending_events;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> g(mu_);
    release_cached();
  }

 private:
  struct Pending {
    cudaEvent_t event;
    int device;
    PinnedBlock* block;
  };

  // Buffers whose events have all completed (and that were freed) become free.
  void process_events(bool wait) {
    cudaError_t failure = drain_pending_events(pending_, wait, [&](const Pending& p) {
      if (--p.block->pending_events == 0 && !p.block->in_use)
        free_.insert({p.block->size, p.block->ptr});
    });
    if (failure != cudaSuccess)
      DDP_THROW(CudaError, "waiting for the copy events of pinned buffers: {}: {}",
                cudaGetErrorName(failure), cudaGetErrorString(failure));
  }

  void release_cached() {
    process_events(/*wait=*/true);
    for (auto it = free_.begin(); it != free_.end();) {
      cudaError_t err = cudaFreeHost(it->second);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        DDP_LOG_WARNING("cudaFreeHost of a cached {} pinned buffer failed: {}",
                        format_bytes(it->first), cudaGetErrorString(err));
        ++it;
        continue;
      }
      auto node = blocks_.find(it->second);
      reserved_ -= node->second->size;
      delete node->second;
      blocks_.erase(node);
      it = free_.erase(it);
    }
  }

  std::mutex mu_;                                   // guards everything below
  std::unordered_map<void*, PinnedBlock*> blocks_;  // every buffer, by address
  std::set<std::pair<size_t, void*>> free_;         // (size, address) of free buffers
  std::vector<Pending> pending_;
  size_t reserved_ = 0;
};

PinnedAllocator& pinned_allocator() {
  static auto* a = new PinnedAllocator;  // See Note [Leaked singletons]
  return *a;
}

}  // namespace

Storage cuda_pinned_allocate(size_t nbytes) {
  if (nbytes == 0) return Storage(nullptr, 0, Device::cpu(), {});
  if (!cuda::is_available())
    DDP_THROW(DeviceError, "pinned_allocate: no usable CUDA device: {}",
              cuda::unavailable_reason());
  PinnedAllocator* a = &pinned_allocator();
  PinnedBlock* b = a->allocate(nbytes);
  return Storage(b->ptr, nbytes, Device::cpu(), [a, b](void*) { a->free(b); });
}

void pinned_record_event(void* ptr, cuda::Stream stream) {
  if (!ptr) return;
  if (!cuda::is_available())
    DDP_THROW(DeviceError, "pinned_record_event: no usable CUDA device: {}",
              cuda::unavailable_reason());
  pinned_allocator().record_event(ptr, stream);
}

void pinned_empty_cache() {
  if (cuda::is_available()) pinned_allocator().empty_cache();
}

}  // namespace ddp
