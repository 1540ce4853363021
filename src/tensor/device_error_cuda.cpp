// Deferred device errors: the per-device record kernels report bad indices
// into, and the check the synchronisation points run.
//
// Note [Deferred device errors]
// An index check on the host needs the index values on the host: a
// device->host copy that waits for every kernel queued before it, once per
// embedding or cross_entropy call, which stalls the CPU's run-ahead of the
// GPU in every training step. Instead a CUDA kernel that finds an index out
// of range writes a small record (kernels/common/device_error.h: the op, the
// bad value, its position and the valid bound) and skips that element: it
// never reads or writes out of bounds, so the stream and the allocator stay
// healthy. Only the first error after a check is kept.
//
// The record lives in mapped pinned host memory (cudaHostAllocMapped): the
// kernel writes it through its device address, the host reads it directly,
// no copy and no extra kernel. Only one thread may write it per error, and
// atomics on mapped host memory are not guaranteed over every link, so the
// claim is a compare-and-swap on a counter in device memory: the thread
// reads the record's generation g (which the host bumps each time it clears
// the record) and moves the counter from g to g + 1; the one that succeeds
// writes the fields and then state = 2. No reset of device memory is ever
// needed. One record and counter per device, allocated the first time a
// kernel asks for them and kept for the process's life.
//
// Every point where the host waits for the device reads it after the wait:
// cuda::synchronize, Stream::synchronize, Event::synchronize, and the
// blocking device<->host copies (Tensor::cpu(), .item(), .to(cpu),
// from_vector onto the device), through raise_deferred_device_error. A
// recorded error is raised there as IndexError naming the op ("embedding:
// index 50257 at position 17 is out of range [0, 50257) (found on cuda:0 at
// this synchronisation; the op ran earlier, asynchronously)") and the record
// is cleared, so the error is raised once and later work runs normally. The
// outputs of the failed op hold zeros where the bad indices were; they are
// the caller's to discard. A synchronisation on one stream reports errors of
// kernels on other streams of that device that have finished by then: the
// error is the device's, not the stream's. The CPU kernels raise at once.

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <mutex>

#include "core/cuda_check.h"
#include "ddp/core/error.h"
#include "ddp/tensor/cuda.h"
#include "tensor/device_error.h"
#include "tensor/device_guard.h"

namespace ddp::detail {

namespace {

constexpr int kMaxRecordDevices = 64;
std::array<std::atomic<kernels::DeviceErrorRecord*>, kMaxRecordDevices> g_records{};
std::array<int32_t*, kMaxRecordDevices> g_claims{};  // written before g_records (release)
std::mutex g_alloc_mutex;

void check_device(int device) {
  DDP_CHECK_T(DeviceError, device >= 0 && device < kMaxRecordDevices,
              "device error record: device index {} is outside [0, {})", device, kMaxRecordDevices);
}

std::mutex g_raise_mutex;  // one thread reads and clears a record at a time

void raise_from(int device, kernels::DeviceErrorRecord* rec) {
  // After the synchronisation the kernel's writes are visible; state 2 says
  // the fields are complete.
  auto* state = reinterpret_cast<volatile int32_t*>(&rec->state);
  if (*state != 2) return;
  kernels::DeviceErrorRecord copy;
  {
    std::lock_guard<std::mutex> lock(g_raise_mutex);
    if (*state != 2) return;  // another thread took it
    copy = *const_cast<const kernels::DeviceErrorRecord*>(rec);
    *state = 0;
    // A new generation: the next failing kernel can claim the record.
    __atomic_store_n(&rec->generation, copy.generation + 1, __ATOMIC_RELEASE);
  }
  DDP_THROW(IndexError,
            "{}: index {} at position {} is out of range [0, {}) (found on cuda:{} at this "
            "synchronisation; the op ran earlier, asynchronously: see Deferred device errors "
            "in docs/nn.md)",
            kernels::device_error_op_name(copy.op), copy.value, copy.position, copy.bound, device);
}

}  // namespace

kernels::DeviceErrorSlot device_error_record(int device) {
  check_device(device);
  kernels::DeviceErrorRecord* rec = g_records[size_t(device)].load(std::memory_order_acquire);
  if (rec) return {rec, g_claims[size_t(device)]};
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  rec = g_records[size_t(device)].load(std::memory_order_relaxed);
  if (rec) return {rec, g_claims[size_t(device)]};
  CudaDeviceGuard guard(device);
  void* claim = nullptr;
  DDP_CUDA_CHECK(cudaMalloc(&claim, sizeof(int32_t)));
  // Generation 0 unclaimed, in place before any kernel reads it: zeroed on
  // the device's current stream (where the asking kernel is about to run),
  // waiting for that stream only, never for the whole device (a collective
  // on another stream may be waiting for other ranks). Later kernels on
  // other streams are ordered after this host wait.
  auto stream = static_cast<cudaStream_t>(cuda::current_stream(device).handle());
  DDP_CUDA_CHECK(cudaMemsetAsync(claim, 0, sizeof(int32_t), stream));
  DDP_CUDA_CHECK(cudaStreamSynchronize(stream));
  void* host = nullptr;
  DDP_CUDA_CHECK(cudaHostAlloc(&host, sizeof(kernels::DeviceErrorRecord),
                               cudaHostAllocMapped | cudaHostAllocPortable));
  auto* h = static_cast<kernels::DeviceErrorRecord*>(host);
  *h = kernels::DeviceErrorRecord{};
  void* dev = nullptr;
  DDP_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
  // With unified addressing (every 64-bit platform CUDA 13 supports) the
  // device address equals the host one; the host reads through `h`.
  DDP_CHECK_T(CudaError, dev == host,
              "device error record: mapped memory has a different device address on cuda:{}",
              device);
  g_claims[size_t(device)] = static_cast<int32_t*>(claim);
  g_records[size_t(device)].store(h, std::memory_order_release);
  return {h, g_claims[size_t(device)]};
}

void raise_deferred_device_error(int device) {
  if (device >= 0) {
    if (device >= kMaxRecordDevices) return;
    if (auto* rec = g_records[size_t(device)].load(std::memory_order_acquire))
      raise_from(device, rec);
    return;
  }
  for (int d = 0; d < kMaxRecordDevices; ++d)
    if (auto* rec = g_records[size_t(d)].load(std::memory_order_acquire)) raise_from(d, rec);
}

}  // namespace ddp::detail
