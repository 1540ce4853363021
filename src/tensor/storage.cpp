#include "ddp/tensor/storage.h"

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/cuda.h"

namespace ddp {

Storage::Storage(void* data, size_t nbytes, Device device, Deleter deleter)
    : impl_(std::make_shared<Impl>(data, nbytes, device, std::move(deleter))) {}

namespace {
std::atomic<uint64_t> next_storage_id{1};
}

Storage::Impl::Impl(void* d, size_t n, Device dev, Deleter del)
    : data(d), nbytes(n), device(dev), deleter(std::move(del)),
      id(next_storage_id.fetch_add(1, std::memory_order_relaxed)) {}

const std::shared_ptr<void>& Storage::attachment() const {
  static const std::shared_ptr<void> none;
  return impl_ ? impl_->attachment : none;
}

void Storage::set_attachment(std::shared_ptr<void> a) const {
  DDP_CHECK(impl_ != nullptr, "set_attachment: the storage is undefined");
  impl_->attachment = std::move(a);
}

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
