#pragma once
// A reference-counted block of memory on one device. Tensors are views into a
// Storage (shape, strides, offset), so views share it and keep it alive.

#include <cstddef>
#include <functional>
#include <memory>

#include "ddp/core/device.h"

namespace ddp {

class Storage {
 public:
  using Deleter = std::function<void(void*)>;

  Storage() = default;
  Storage(void* data, size_t nbytes, Device device, Deleter deleter);

  void* data() const { return impl_ ? impl_->data : nullptr; }
  size_t nbytes() const { return impl_ ? impl_->nbytes : 0; }
  Device device() const { return impl_ ? impl_->device : Device::cpu(); }
  bool defined() const { return impl_ != nullptr; }
  long use_count() const { return impl_.use_count(); }
  bool is_same(const Storage& o) const { return impl_ == o.impl_; }

  // Allocates nbytes on the device: the CPU allocator (64-byte aligned) for
  // the host, the CUDA caching allocator for a GPU.
  static Storage allocate(size_t nbytes, Device device);

 private:
  struct Impl {
    void* data;
    size_t nbytes;
    Device device;
    Deleter deleter;
    Impl(void* d, size_t n, Device dev, Deleter del)
        : data(d), nbytes(n), device(dev), deleter(std::move(del)) {}
    Impl(const Impl&) = delete;  // exactly one owner frees the memory
    Impl& operator=(const Impl&) = delete;
    ~Impl();
  };
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddp
