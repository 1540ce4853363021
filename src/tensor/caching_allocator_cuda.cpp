// The CUDA caching allocator: device memory for tensors without cudaMalloc or
// cudaFree on the hot path. See Note [Caching allocator].

#include "ddp/tensor/cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cuda_check.h"
#include "cuda/on_device.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "core/format_bytes.h"
#include "tensor/caching_allocator.h"
#include "tensor/cuda_event_pool.h"
#include "tensor/device_guard.h"
#include "tensor/pinned_allocator.h"
#include "tensor/cuda_pending_events.h"

namespace ddp {

// Note [Caching allocator]
// cudaMalloc and cudaFree are slow and cudaFree synchronises the whole device,
// so tensors get their memory from a cache that keeps everything it ever got
// from cudaMalloc ("reserved") until empty_cache(). Per device:
//
// - Requests are rounded up to 512 bytes. Requests up to 1 MiB come from the
//   small pool, whose segments (one cudaMalloc each) are 2 MiB; larger ones
//   from the large pool, whose segments are max(20 MiB, size rounded to
//   2 MiB). Keeping small blocks apart stops them from pinning down big
//   segments that large tensors could otherwise reuse.
// - A free block is found by best fit: each pool is an ordered set keyed by
//   (stream, size, address), so lower_bound finds the smallest block of the
//   requesting stream that is big enough, preferring low addresses.
// - The block is split when the rest is worth keeping (>= 512 B in the small
//   pool, > 1 MiB in the large one); the rest stays free in the pool. A block
//   keeps its segment neighbours (prev/next), and on free it merges with free
//   neighbours, so a segment whose tensors are all gone is one block again
//   and can be returned by empty_cache().
// - Streams. A block belongs to the stream current when it was allocated.
//   Work on one stream runs in order, so a block freed by the host while its
//   kernels are still queued can be handed to the next request of the same
//   stream at once: that request's kernels queue behind the old ones. It must
//   never go to another stream, hence the stream in the key. When a block is
//   also used on other streams, the user says so with record_stream(); on free
//   an event is recorded on each of those streams and the block returns to
//   the pool only when all have completed. The events are polled on the next
//   allocation (never waited for, except by empty_cache and the out-of-memory
//   retry).
// - When cudaMalloc fails, the allocator waits for pending events, cudaFrees
//   every whole free segment of the device and tries once more; if that fails
//   too it raises OutOfMemoryError with the numbers a user needs.
//
// allocated_bytes counts rounded block sizes held by tensors (and drops when a
// tensor is freed, even if the block still waits for events); reserved_bytes
// counts whole segments. Blocks whose stream was destroyed stay cached under
// its handle; CUDA reuses a handle only once the old stream's work is done, so
// a later stream with the same handle may safely take them.
//
// Note [Leaked singletons]
// There is one allocator per device for the whole process, like PyTorch's:
// device memory is a per-device resource, and every model and process group
// in the process must share one cache (two caches would each hoard memory the
// other cannot use). This is the accepted exception to the "no process-global
// mutable state" rule. The allocators are created with new and never deleted:
// a Storage held by a static object may be freed during static destruction,
// after a static allocator would already be gone. The memory is reclaimed by
// the driver at process exit anyway.
namespace {

constexpr size_t kRound = 512;
constexpr size_t kSmallSize = size_t(1) << 20;      // <= 1 MiB: small pool
constexpr size_t kSmallSegment = size_t(2) << 20;   // small pool segment
constexpr size_t kLargeSegment = size_t(20) << 20;  // minimum large segment
constexpr size_t kLargeRound = size_t(2) << 20;     // large segments: multiples of 2 MiB

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

enum class BlockState : uint8_t { cached, in_use, pending };

struct Block {
  void* ptr = nullptr;
  size_t size = 0;
  cudaStream_t stream = nullptr;  // the stream it belongs to (on the allocator's device)
  bool small = false;             // which pool
  BlockState state = BlockState::cached;
  int pending_events = 0;
  std::vector<cuda::Stream> uses;  // other streams, from record_stream
  Block* prev = nullptr;           // neighbours within the segment
  Block* next = nullptr;
};

struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return uintptr_t(a->stream) < uintptr_t(b->stream);
    if (a->size != b->size) return a->size < b->size;
    return uintptr_t(a->ptr) < uintptr_t(b->ptr);
  }
};
using Pool = std::set<Block*, BlockOrder>;

struct PendingEvent {
  cudaEvent_t event;
  int device;  // the event's device (the recording stream's)
  Block* block;
};

class DeviceAllocator {
 public:
  explicit DeviceAllocator(int device) : device_(device) {}

  // Returns an in-use block of at least nbytes for `stream`.
  Block* allocate(size_t nbytes, cudaStream_t stream) {
    std::lock_guard<std::mutex> g(mu_);
    process_events(/*wait=*/false);
    if (nbytes > std::numeric_limits<size_t>::max() / 2) throw_oom(nbytes, nbytes, false);
    const size_t size = round_up(nbytes, kRound);
    const bool small = size <= kSmallSize;
    Pool& pool = small ? small_ : large_;

    Block* b = take_best_fit(pool, stream, size);
    if (!b) b = new_segment(nbytes, size, small, stream);

    const size_t rest = b->size - size;
    if (small ? rest >= kRound : rest > kSmallSize) {
      auto* r = new Block;
      r->ptr = static_cast<char*>(b->ptr) + size;
      r->size = rest;
      r->stream = stream;
      r->small = small;
      r->prev = b;
      r->next = b->next;
      if (b->next) b->next->prev = r;
      b->next = r;
      b->size = size;
      pool.insert(r);
    }
    b->state = BlockState::in_use;
    active_.emplace(b->ptr, b);
    stats_.allocated_bytes += b->size;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    ++stats_.num_allocs;
    return b;
  }

  // The Storage deleter: never throws.
  void free(Block* b) noexcept {
    std::lock_guard<std::mutex> g(mu_);
    active_.erase(b->ptr);
    stats_.allocated_bytes -= b->size;
    if (b->uses.empty()) {
      return_to_pool(b);
      return;
    }
    b->state = BlockState::pending;
    try {
      for (const cuda::Stream& s : b->uses) {
        CudaDeviceGuard guard(s.device());  // the legacy stream (nullptr) is the current device's
        auto ev = static_cast<cudaEvent_t>(acquire_cuda_event(s.device()));
        cudaError_t err = cudaEventRecord(ev, cuda_kernels::native(s));
        if (err != cudaSuccess) {
          release_cuda_event(s.device(), ev);
          DDP_CUDA_CHECK(err);
        }
        pending_.push_back({ev, s.device(), b});
        ++b->pending_events;
      }
      b->uses.clear();
    } catch (const std::exception& e) {
      // CUDA is failing (or shutting down). The block cannot be proven idle,
      // so it is leaked rather than risk handing out memory still in use: a
      // phantom pending event that never completes keeps it out of the pool.
      ++b->pending_events;
      DDP_LOG_WARNING(
          "CUDA caching allocator: cannot record stream events for a freed block "
          "of {} on cuda:{}; not reusing it: {}",
          format_bytes(b->size), device_, e.what());
      b->uses.clear();
    }
  }

  // False when ptr is not the start of a live block of this device.
  bool record_stream(void* ptr, const cuda::Stream& s) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = active_.find(ptr);
    if (it == active_.end()) return false;
    Block* b = it->second;
    if (s.device() == device_ && s.handle() == static_cast<void*>(b->stream)) return true;
    if (std::find(b->uses.begin(), b->uses.end(), s) == b->uses.end()) b->uses.push_back(s);
    return true;
  }

  cuda::MemoryStats stats() {
    std::lock_guard<std::mutex> g(mu_);
    return stats_;
  }

  void reset_peaks() {
    std::lock_guard<std::mutex> g(mu_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> g(mu_);
    release_cached();
  }

  std::string summary(const std::string& device_name) {
    std::lock_guard<std::mutex> g(mu_);
    size_t cached_bytes = 0, cached_blocks = 0;
    for (const Pool* pool : {&small_, &large_}) {
      cached_blocks += pool->size();
      for (const Block* b : *pool) cached_bytes += b->size;
    }
    std::set<const Block*> pending_blocks;
    for (const PendingEvent& p : pending_) pending_blocks.insert(p.block);
    const cuda::MemoryStats& s = stats_;
    std::string out = fmt::format("CUDA caching allocator, cuda:{} ({})\n", device_, device_name);
    out += fmt::format("  {:<22}{:>14}{:>14}\n", "", "current", "peak");
    out += fmt::format("  {:<22}{:>14}{:>14}\n", "allocated", format_bytes(s.allocated_bytes),
                       format_bytes(s.peak_allocated_bytes));
    out += fmt::format("  {:<22}{:>14}{:>14}\n", "reserved", format_bytes(s.reserved_bytes),
                       format_bytes(s.peak_reserved_bytes));
    out += fmt::format("  {:<22}{:>14}   ({} free blocks in {} segments: {} small, {} large)\n",
                       "cached, free", format_bytes(cached_bytes), cached_blocks,
                       small_segments_ + large_segments_, small_segments_, large_segments_);
    out += fmt::format("  {:<22}{:>14}   blocks (freed, used by other streams)\n",
                       "awaiting events", pending_blocks.size());
    out += fmt::format("  allocations: {} served, {} needed cudaMalloc, {} out of memory\n",
                       s.num_allocs, s.num_cuda_mallocs, s.num_ooms);
    return out;
  }

 private:
  static Block* take_best_fit(Pool& pool, cudaStream_t stream, size_t size) {
    Block key;
    key.stream = stream;
    key.size = size;
    key.ptr = nullptr;
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    pool.erase(it);
    return b;
  }

  // A fresh segment (one block), retrying once after releasing the cache.
  Block* new_segment(size_t nbytes, size_t size, bool small, cudaStream_t stream) {
    const size_t seg = small ? kSmallSegment : std::max(kLargeSegment, round_up(size, kLargeRound));
    void* ptr = nullptr;
    cudaError_t err = cuda_malloc(&ptr, seg);
    if (err == cudaErrorMemoryAllocation) {
      release_cached();
      err = cuda_malloc(&ptr, seg);
    }
    if (err == cudaErrorMemoryAllocation) throw_oom(nbytes, seg, true);
    if (err != cudaSuccess)
      DDP_THROW(CudaError, "cudaMalloc of {} on cuda:{} failed: {}: {}", format_bytes(seg), device_,
                cudaGetErrorName(err), cudaGetErrorString(err));
    auto* b = new Block;
    b->ptr = ptr;
    b->size = seg;
    b->stream = stream;
    b->small = small;
    ++(small ? small_segments_ : large_segments_);
    ++stats_.num_cuda_mallocs;
    stats_.reserved_bytes += seg;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    return b;
  }

  cudaError_t cuda_malloc(void** ptr, size_t n) {
    CudaDeviceGuard guard(device_);
    cudaError_t err = cudaMalloc(ptr, n);
    if (err != cudaSuccess) (void)cudaGetLastError();  // not sticky, but clear "last error"
    return err;
  }

  // released: the cache was emptied before the last attempt.
  [[noreturn]] void throw_oom(size_t nbytes, size_t segment, bool released) {
    ++stats_.num_ooms;
    size_t free_b = 0, total_b = 0;
    std::string device_info;
    {
      CudaDeviceGuard guard(device_);
      if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        device_info = fmt::format("{} total, {} free", format_bytes(total_b), format_bytes(free_b));
      else
        (void)cudaGetLastError(), device_info = "total/free unknown";
    }
    DDP_THROW(
        OutOfMemoryError,
        "CUDA out of memory: tried to allocate {} ({} bytes, as a segment of {}) on "
        "cuda:{} ({}). libddp has {} allocated to tensors and {} reserved by its caching "
        "allocator on this device{}. Free tensors you no longer need or use a smaller batch",
        format_bytes(nbytes), nbytes, format_bytes(segment), device_, device_info,
        format_bytes(stats_.allocated_bytes), format_bytes(stats_.reserved_bytes),
        released ? " (unused cached blocks were returned to the driver before retrying)" : "");
  }

  // Freed blocks whose events have all completed go back to their pool. With
  // wait, blocks until all pending events complete. A failing event stays
  // pending (its block is not provably idle) and the failure is raised.
  void process_events(bool wait) {
    if (pending_.empty()) return;
    cudaError_t failure = drain_pending_events(pending_, wait, [&](const PendingEvent& p) {
      if (--p.block->pending_events == 0) return_to_pool(p.block);
    });
    if (failure != cudaSuccess)
      DDP_THROW(CudaError, "waiting for the stream events of freed blocks on cuda:{}: {}: {}",
                device_, cudaGetErrorName(failure), cudaGetErrorString(failure));
  }

  // b (not in any pool) becomes free: merge with free neighbours, then cache.
  void return_to_pool(Block* b) {
    Pool& pool = b->small ? small_ : large_;
    b->state = BlockState::cached;
    for (Block* n : {b->prev, b->next}) {
      if (!n || n->state != BlockState::cached) continue;
      pool.erase(n);
      if (n == b->prev) {
        b->ptr = n->ptr;
        b->prev = n->prev;
        if (b->prev) b->prev->next = b;
      } else {
        b->next = n->next;
        if (b->next) b->next->prev = b;
      }
      b->size += n->size;
      delete n;
    }
    pool.insert(b);
  }

  // Waits for pending events, then cudaFrees every segment that is one free
  // block. cudaFree synchronises the device: never on the hot path.
  void release_cached() {
    process_events(/*wait=*/true);
    CudaDeviceGuard guard(device_);
    for (Pool* pool : {&small_, &large_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev || b->next) {
          ++it;
          continue;
        }
        cudaError_t err = cudaFree(b->ptr);
        if (err != cudaSuccess) {  // keep it cached: better than losing track of it
          (void)cudaGetLastError();
          DDP_LOG_WARNING("cudaFree of a cached {} segment on cuda:{} failed: {}",
                          format_bytes(b->size), device_, cudaGetErrorString(err));
          ++it;
          continue;
        }
        stats_.reserved_bytes -= b->size;
        --(b->small ? small_segments_ : large_segments_);
        it = pool->erase(it);
        delete b;
      }
    }
  }

  const int device_;
  std::mutex mu_;  // guards everything below
  Pool small_, large_;
  std::unordered_map<void*, Block*> active_;  // in-use blocks by address
  std::vector<PendingEvent> pending_;
  cuda::MemoryStats stats_;
  size_t small_segments_ = 0, large_segments_ = 0;
};

// One allocator per device, created on first use. See Note [Leaked singletons].
DeviceAllocator& allocator_for(int device) {
  static const std::vector<DeviceAllocator*>* const all = [] {
    auto* v = new std::vector<DeviceAllocator*>;
    for (int d = 0; d < cuda::device_count(); ++d) v->push_back(new DeviceAllocator(d));
    return v;
  }();
  return *(*all)[size_t(device)];
}

void check_device(int device, const char* what) {
  if (device >= 0 && device < cuda::device_count()) return;
  if (!cuda::is_available())
    DDP_THROW(DeviceError, "{}: no usable CUDA device: {}", what, cuda::unavailable_reason());
  DDP_THROW(DeviceError, "{}: CUDA device index {} out of range: {} device(s) present", what,
            device, cuda::device_count());
}

}  // namespace

Storage cuda_allocate(size_t nbytes, int device) {
  check_device(device, "cuda_allocate");
  if (nbytes == 0) return Storage(nullptr, 0, Device::cuda(device), {});
  auto stream = cuda_kernels::native(cuda::current_stream(device));
  DeviceAllocator* a = &allocator_for(device);
  Block* b = a->allocate(nbytes, stream);
  // b->ptr cannot change while b is in use, so reading it unlocked is safe.
  return Storage(b->ptr, nbytes, Device::cuda(device), [a, b](void*) { a->free(b); });
}

void cuda_record_stream(void* ptr, cuda::Stream stream) {
  if (!ptr) return;
  check_device(stream.device(), "record_stream");
  // Usually the block is on the stream's device; look there first.
  if (allocator_for(stream.device()).record_stream(ptr, stream)) return;
  for (int d = 0; d < cuda::device_count(); ++d)
    if (d != stream.device() && allocator_for(d).record_stream(ptr, stream)) return;
  DDP_THROW(ValueError,
            "record_stream: {} is not the start of a live block of the CUDA caching allocator "
            "(pass Storage::data() of a CUDA tensor)",
            ptr);
}

cuda::MemoryStats cuda_memory_stats(int device) {
  check_device(device, "memory_stats");
  return allocator_for(device).stats();
}

void cuda_reset_peak_memory_stats(int device) {
  check_device(device, "reset_peak_memory_stats");
  allocator_for(device).reset_peaks();
}

std::string cuda_memory_summary(int device) {
  check_device(device, "memory_summary");
  return allocator_for(device).summary(cuda::device_name(device));
}

void cuda_empty_cache() {
  if (!cuda::is_available()) return;  // nothing can be cached
  for (int d = 0; d < cuda::device_count(); ++d) allocator_for(d).empty_cache();
  pinned_empty_cache();
}

}  // namespace ddp
