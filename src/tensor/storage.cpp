#include "ddp/tensor/storage.h"

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/cuda.h"

namespace ddp {

Storage::Storage(void* data, size_t nbytes, Device device, Deleter deleter)
    : impl_(std::make_shared<Impl>(data, nbytes, device, std::move(deleter))) {}

Storage::Impl::~Impl() {
  if (!deleter) return;
  try {
    deleter(data);
  } catch (const std::exception& e) {  // destructors log, never throw
    DDP_LOG_ERROR("freeing {} bytes on {} failed: {}", nbytes, device.str(), e.what());
  }
}

Storage Storage::allocate(size_t nbytes, Device device) {
  if (device.is_cuda()) {
    DDP_CHECK_T(DeviceError, device.index >= 0 && device.index < cuda::device_count(),
                "cannot allocate {} bytes on {}: {} CUDA device(s) available{}", nbytes,
                device.str(), cuda::device_count(),
                cuda::is_available() ? "" : " (" + cuda::unavailable_reason() + ")");
  }
  return backend_for(device).allocate(nbytes, device.index);
}

}  // namespace ddp
