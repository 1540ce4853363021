// CUDA runtime services (ddp/tensor/cuda.h) in a build with CUDA: device
// discovery, streams, events, and the forwarding of the memory functions to
// the caching allocator (caching_allocator_cuda.cpp). Also the internal helpers
// of device_guard.h and cuda_event_pool.h: CudaDeviceGuard and the event free lists.

#include "ddp/tensor/cuda.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "cuda/on_device.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "tensor/caching_allocator.h"
#include "tensor/cuda_runtime.h"
#include "tensor/cuda_event_pool.h"
#include "tensor/device_error.h"
#include "tensor/device_guard.h"
#include "tensor/pinned_allocator.h"

namespace ddp {

// Note [CUDA availability]
// Whether CUDA can be used is decided once per process by cudaGetDeviceCount:
// a machine without a GPU, without a driver, or with a driver too old for this
// runtime (cudaErrorInsufficientDriver) gets 0 devices and a reason string, and
// libddp stays on the CPU. The answer is cached in a function-local static
// (thread-safe initialisation, read-only afterwards), so asking is cheap on hot
// paths. The failed call leaves a sticky "last error" that would otherwise be
// reported by the next unrelated DDP_CUDA_CHECK_LAUNCH, so it is cleared.
namespace {

struct Availability {
  int count = 0;
  std::string reason;  // empty when count > 0
};

const Availability& availability() {
  static const Availability a = [] {
    Availability r;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      r.reason = fmt::format("{}: {}", cudaGetErrorName(err), cudaGetErrorString(err));
    } else if (n <= 0) {
      r.reason = "no CUDA device found";
    } else {
      r.count = n;
    }
    return r;
  }();
  return a;
}

void require_available(const char* what) {
  if (availability().count == 0)
    DDP_THROW(DeviceError, "{}: no usable CUDA device: {}", what, availability().reason);
}

void check_index(int index, const char* what) {
  require_available(what);
  DDP_CHECK_T(DeviceError, index >= 0 && index < availability().count,
              "{}: CUDA device index {} out of range: {} device(s) present", what, index,
              availability().count);
}

// -1 means the calling thread's current device.
int resolve_device(int device, const char* what) {
  require_available(what);
  if (device == -1) DDP_CUDA_CHECK(cudaGetDevice(&device));
  check_index(device, what);
  return device;
}

// Note [Current stream]
// Like PyTorch, the current stream is per thread and per device
// (thread_local), so two threads — e.g. a training loop and a DDP
// communication thread — each queue work where they chose without locking,
// and no process-global state is shared. Unset slots mean the legacy default
// stream (handle nullptr), which is what plain CUDA code uses.
void*& current_slot(int device) {
  thread_local std::vector<void*> slots;
  if (slots.size() <= size_t(device)) slots.resize(size_t(device) + 1, nullptr);
  return slots[size_t(device)];
}

// Per-device free lists of timing-disabled events. Leaked on purpose (see
// Note [Leaked singletons] in caching_allocator_cuda.cpp): Storage deleters that
// run during static destruction may still hand events back.
struct EventFreeLists {
  std::mutex mu;
  std::vector<std::vector<cudaEvent_t>> free;
};
EventFreeLists& event_free_lists() {
  static auto* lists = new EventFreeLists;
  return *lists;
}

}  // namespace

// ---- internal helpers (caching_allocator.h, pinned_allocator.h, device_guard.h, cuda_event_pool.h) --------------------------------------

CudaDeviceGuard::CudaDeviceGuard(int device) {
  check_index(device, "CudaDeviceGuard");
  int cur = 0;
  DDP_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != device) {
    DDP_CUDA_CHECK(cudaSetDevice(device));
    prev_ = cur;
  }
}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (prev_ >= 0) DDP_CUDA_WARN(cudaSetDevice(prev_));
}

void* acquire_cuda_event(int device) {
  auto& lists = event_free_lists();
  {
    std::lock_guard<std::mutex> g(lists.mu);
    if (size_t(device) < lists.free.size() && !lists.free[size_t(device)].empty()) {
      cudaEvent_t e = lists.free[size_t(device)].back();
      lists.free[size_t(device)].pop_back();
      return e;
    }
  }
  CudaDeviceGuard guard(device);  // an event belongs to the device current at creation
  cudaEvent_t e = nullptr;
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void release_cuda_event(int device, void* event) {
  if (!event) return;
  auto& lists = event_free_lists();
  std::lock_guard<std::mutex> g(lists.mu);
  if (lists.free.size() <= size_t(device)) lists.free.resize(size_t(device) + 1);
  lists.free[size_t(device)].push_back(static_cast<cudaEvent_t>(event));
}

// ---- the runtime libddp.so forwards ddp/tensor/cuda.h to ------------------------
// Note [Loading CUDA when first used] (src/tensor/cuda_runtime.h): this file
// defines none of cuda.h's functions itself; libddp.so does, and calls these.

namespace {

class LoadedRuntime final : public detail::CudaRuntime {
 public:
  bool is_available() override { return availability().count > 0; }
  int device_count() override { return availability().count; }
  std::string unavailable_reason() override { return availability().reason; }

  int current_device() override { return resolve_device(-1, "current_device"); }

  void set_device(int index) override {
    check_index(index, "set_device");
    DDP_CUDA_CHECK(cudaSetDevice(index));
  }

  void synchronize(int device) override {
    device = resolve_device(device, "synchronize");
    CudaDeviceGuard guard(device);
    DDP_CUDA_CHECK(cudaDeviceSynchronize());
    detail::raise_deferred_device_error(device);  // Note [Deferred device errors]
  }

  std::string device_name(int index) override {
    check_index(index, "device_name");
    cudaDeviceProp prop{};
    DDP_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    return prop.name;
  }

  // ---- streams ----------------------------------------------------------------

  // Streams are created non-blocking: they do not synchronise implicitly with
  // the legacy default stream, so a communication stream can overlap with
  // compute queued there; all ordering goes through events.
  cuda::Stream create_stream(int device, bool high_priority) override {
    device = resolve_device(device, "Stream::create");
    CudaDeviceGuard guard(device);
    int least = 0, greatest = 0;  // numerically greatest = lowest priority
    DDP_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s = nullptr;
    DDP_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking,
                                                high_priority ? greatest : least));
    return cuda::Stream(s, device);
  }

  void destroy_stream(const cuda::Stream& stream) override {
    require_available("Stream::destroy");
    // Work still queued finishes first: cudaStreamDestroy releases the stream
    // once the device is done with it, and returns at once.
    DDP_CUDA_CHECK(cudaStreamDestroy(static_cast<cudaStream_t>(stream.handle())));
    void*& slot = current_slot(stream.device());
    if (slot == stream.handle()) slot = nullptr;  // this thread must not keep using it
  }

  void synchronize_stream(const cuda::Stream& stream) override {
    check_index(stream.device(), "Stream::synchronize");
    CudaDeviceGuard guard(stream.device());  // handle nullptr: the device's default stream
    DDP_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle())));
    detail::raise_deferred_device_error(stream.device());  // Note [Deferred device errors]
  }

  cuda::Stream current_stream(int device) override {
    device = resolve_device(device, "current_stream");
    return cuda::Stream(current_slot(device), device);
  }

  void set_current_stream(const cuda::Stream& stream) override {
    check_index(stream.device(), "set_current_stream");
    current_slot(stream.device()) = stream.handle();
  }

  // The guard changes the stream only, not the current device: kernels pick
  // their device from their tensors (CudaDeviceGuard), and then their stream
  // from current_stream(device).
  void restore_current_stream(const cuda::Stream& stream) noexcept override {
    current_slot(stream.device()) = stream.handle();  // cannot fail: no CUDA call
  }

  // ---- events -----------------------------------------------------------------

  // Note [Timed events]
  // Event is created with timing enabled (cudaEventDefault) so elapsed_ms works
  // without a flag in the API; the cost is a timestamp write per record, which
  // is negligible at the granularity libddp records events (per bucket, per
  // step). The allocators use their own timing-disabled events
  // (acquire_cuda_event). The CUDA event is created lazily on the first
  // record(), on the recording stream's device; recording on another device's
  // stream later recreates it there.
  void destroy_event(void* event) noexcept override {
    DDP_CUDA_WARN(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
  }

  void record_event(void*& event, int& device, const cuda::Stream& s) override {
    check_index(s.device(), "Event::record");
    CudaDeviceGuard guard(s.device());
    if (event && device != s.device()) {
      DDP_CUDA_WARN(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
      event = nullptr;
    }
    if (!event) {
      cudaEvent_t e = nullptr;
      DDP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));  // Note [Timed events]
      event = e;
      device = s.device();
    }
    DDP_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), cuda_kernels::native(s)));
  }

  void wait_event(void* event, const cuda::Stream& s) override {
    check_index(s.device(), "Event::wait");
    CudaDeviceGuard guard(s.device());
    DDP_CUDA_CHECK(cudaStreamWaitEvent(cuda_kernels::native(s), static_cast<cudaEvent_t>(event), 0));
  }

  bool query_event(void* event) override {
    cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" is an answer, not an error
      return false;
    }
    DDP_CUDA_CHECK(err);
    return false;
  }

  void synchronize_event(void* event, int device) override {
    DDP_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
    detail::raise_deferred_device_error(device);  // Note [Deferred device errors]
  }

  float elapsed_ms(void* start, void* end) override {
    DDP_CHECK(start && end, "Event::elapsed_ms: both events must have been recorded");
    float ms = 0.f;
    // cudaErrorNotReady (raised as CudaError) when either has not completed yet.
    DDP_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start),
                                        static_cast<cudaEvent_t>(end)));
    return ms;
  }

  // ---- caching allocator front --------------------------------------------------

  cuda::MemoryStats memory_stats(int device) override {
    return cuda_memory_stats(resolve_device(device, "memory_stats"));
  }

  void reset_peak_memory_stats(int device) override {
    cuda_reset_peak_memory_stats(resolve_device(device, "reset_peak_memory_stats"));
  }

  std::string memory_summary(int device) override {
    return cuda_memory_summary(resolve_device(device, "memory_summary"));
  }

  // Without a GPU nothing can be cached, so there is nothing to empty: a no-op
  // rather than an error, so that generic cleanup code runs on CPU machines.
  void empty_cache() override {
    if (is_available()) cuda_empty_cache();
  }

  void record_stream(void* ptr, const cuda::Stream& stream) override {
    check_index(stream.device(), "record_stream");
    cuda_record_stream(ptr, stream);
  }

  Storage pinned_allocate(size_t nbytes) override { return cuda_pinned_allocate(nbytes); }
};

}  // namespace
}  // namespace ddp

// Note [Loading CUDA when first used]: what libddp.so looks up by name.
extern "C" ddp::detail::CudaRuntime* ddp_cuda_runtime() {
  static ddp::LoadedRuntime* const runtime = new ddp::LoadedRuntime;  // used until exit
  return runtime;
}
