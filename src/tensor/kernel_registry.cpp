// See Note [Kernel registry] in kernel_registry.h.

#include "tensor/kernel_registry.h"

#include "core/cuda_library.h"

#include <mutex>

#include "ddp/core/env.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/tensor/cuda.h"

namespace ddp::kernels {

namespace {

// Filled by the registrars while libddp loads; read-only afterwards.
std::vector<KernelEntry>& entries() {
  static std::vector<KernelEntry> all;
  return all;
}

const char* device_type_name(DeviceType d) { return d == DeviceType::CUDA ? "cuda" : "cpu"; }

}  // namespace

// The CUDA kernels register when libddp_cuda.so opens (Note [Loading CUDA
// when first used] in src/tensor/cuda_runtime.h): a listing opens it.
const std::vector<KernelEntry>& registered_kernels() {
  ddp::detail::open_cuda_library();
  return entries();
}

namespace detail {

void throw_missing_kernel(const char* op, DeviceType device) {
  std::string devices;
  for (const KernelEntry& e : entries())
    if (e.op == op) devices += std::string(devices.empty() ? "" : ", ") + device_type_name(e.device);
  DDP_THROW(NotImplementedError, "{}: no kernel for device type {} in this libddp{} (it has: {})",
            op, device_type_name(device),
            device == DeviceType::CUDA && !cuda::is_compiled() ? ", which was built without CUDA"
                                                                : "",
            devices.empty() ? "none" : devices);
}

void note_registration(const char* op, DeviceType device, bool duplicate) {
  // Two registrations for one slot are a build mistake (two files claim the
  // kernel); the later one wins, and the log says so.
  if (duplicate)
    DDP_LOG_WARNING("kernel {} for {} registered twice; the later registration wins", op,
                    device_type_name(device));
  entries().push_back({op, device});
}

void after_kernel(const char* op, const Device& device) {
  if (device.type != DeviceType::CUDA || !ddp::detail::cuda_debug_sync()) return;
  try {
    cuda::synchronize(device.index);
  } catch (const IndexError&) {
    throw;  // a deferred index error (Note [Deferred device errors]) names its op already
  } catch (const Error& e) {
    DDP_THROW(CudaError, "{} on {} failed (found by DDP_CUDA_DEBUG_SYNC=1): {}", op, device.str(),
              e.what());
  }
}

}  // namespace detail
}  // namespace ddp::kernels

namespace ddp::detail {
bool cuda_debug_sync() {
  static const bool on = env_bool("DDP_CUDA_DEBUG_SYNC", false);  // read once
  return on;
}
}  // namespace ddp::detail
