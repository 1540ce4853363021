#pragma once
// A reference-counted block of memory on one device. Tensors are views into a
// Storage (shape, strides, offset), so views share it and keep it alive.
//
// Note [Tensor version counter]
// Each Storage counts the writes made to it through the library: every
// in-place tensor method (copy_, fill_, add_, mul_, div_, uniform_,
// normal_...), every optimizer step (for each parameter it updates) and
// every collective of a host process group (for each tensor it writes)
// bump it. Views share their storage's counter, as in PyTorch, where
// `t._version` is shared by a tensor and its views. A cache built from a
// tensor's values (the oneDNN-blocked copy of a convolution weight, Note
// [oneDNN weight cache]) keeps the (id, version) it was built at and is
// valid while both are unchanged: id() is unique to this allocation for the
// process's life, so a freed block's address reused by a new tensor never
// matches. Writes that bypass the library (a kernel filling an output it
// just allocated is not one: nobody has cached that storage yet; an
// application writing through data_ptr() into a live parameter is) must
// call Tensor::bump_version() afterwards.

#include <atomic>
#include <cstddef>
#include <cstdint>
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
  // See Note [Tensor version counter]. id() is 0 for an undefined storage.
  uint64_t id() const { return impl_ ? impl_->id : 0; }
  uint64_t version() const { return impl_ ? impl_->version.load(std::memory_order_acquire) : 0; }
  void bump_version() const {
    if (impl_) impl_->version.fetch_add(1, std::memory_order_acq_rel);
  }
  // An object that lives exactly as long as this storage: a cache of
  // something computed from its values, checked against version() before
  // use, and freed with the memory it was computed from. Not synchronised:
  // the one owner of the slot (the CPU convolution's weight cache) guards it
  // with its own mutex.
  const std::shared_ptr<void>& attachment() const;
  void set_attachment(std::shared_ptr<void> a) const;

  // Allocates nbytes on the device: the CPU allocator (64-byte aligned) for
  // the host, the CUDA caching allocator for a GPU.
  static Storage allocate(size_t nbytes, Device device);

 private:
  struct Impl {
    void* data;
    size_t nbytes;
    Device device;
    Deleter deleter;
    const uint64_t id;
    std::atomic<uint64_t> version{0};
    std::shared_ptr<void> attachment;
    Impl(void* d, size_t n, Device dev, Deleter del);
    Impl(const Impl&) = delete;  // exactly one owner frees the memory
    Impl& operator=(const Impl&) = delete;
    ~Impl();
  };
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddp
