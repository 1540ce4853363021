// The CUDA backend: device memory from the caching allocator, host <-> device
// copies, and the kernels of kernels/cuda/ (bmm: matmul_cuda.cpp). This
// file only forwards: each call makes the tensors' device current and queues
// its kernel on that device's current stream (ddp::cuda::current_stream).

#include "ddp/tensor/cuda.h"

#include <cuda_runtime.h>

#include <cstring>

#include "core/cuda_check.h"
#include "cuda/launchers.h"
#include "cuda/on_device.h"
#include "ddp/tensor/backend.h"
#include "tensor/caching_allocator.h"
#include "tensor/device_error.h"
#include "tensor/device_guard.h"
#include "tensor/pinned_allocator.h"

namespace ddp {

namespace {

using cuda_kernels::native;
using cuda_kernels::OnDevice;

// Page-locked (cudaHostAlloc'd or registered) host memory?
bool is_pinned(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

// Note [Async copies and pinned memory]
// A non-blocking copy must not let the caller's buffer be reused while the
// DMA still touches it. Pageable sources are staged through a cached pinned
// buffer (pinned_allocate), which pinned_record_event keeps from reuse until
// the copy has run, so the caller may free its buffer at once. Pinned
// memory is copied in place; when it is a buffer of the pinned cache (the
// storage of a pinned CPU tensor) its reuse is deferred the same way. Any
// other pinned memory, or a view into the middle of a pinned buffer, is the
// caller's to keep alive until the stream has passed the copy, as with
// cudaMemcpyAsync. Device -> pageable copies are synchronous in CUDA anyway.
void defer_pinned_reuse(void* host, const cuda::Stream& s) {
  try {
    pinned_record_event(host, s);
  } catch (const ValueError&) {
    // Not the start of a pinned-cache buffer: see the Note above.
  }
}

class CudaBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::CUDA; }

  Storage allocate(size_t nbytes, int device_index) override {
    return cuda_allocate(nbytes, device_index);
  }

  void copy(const Tensor& src, const Tensor& dst) override {
    OnDevice on(dst);
    cuda_kernels::copy(src, dst, on.stream);
  }

  void copy_from_host(const void* host, const Tensor& dst, bool non_blocking) override {
    const size_t nbytes = dst.nbytes();
    if (nbytes == 0) return;
    OnDevice on(dst);
    if (!non_blocking) {
      DDP_CUDA_CHECK(
          cudaMemcpyAsync(dst.data_ptr(), host, nbytes, cudaMemcpyHostToDevice, native(on.stream)));
      DDP_CUDA_CHECK(cudaStreamSynchronize(native(on.stream)));
      detail::raise_deferred_device_error(dst.device().index);  // Note [Deferred device errors]
      return;
    }
    if (is_pinned(host)) {
      DDP_CUDA_CHECK(
          cudaMemcpyAsync(dst.data_ptr(), host, nbytes, cudaMemcpyHostToDevice, native(on.stream)));
      defer_pinned_reuse(const_cast<void*>(host), on.stream);
      return;
    }
    Storage staging = pinned_allocate(nbytes);  // See Note [Async copies and pinned memory]
    std::memcpy(staging.data(), host, nbytes);
    DDP_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), staging.data(), nbytes, cudaMemcpyHostToDevice,
                                   native(on.stream)));
    pinned_record_event(staging.data(), on.stream);
  }

  void copy_to_host(const Tensor& src, void* host, bool non_blocking) override {
    const size_t nbytes = src.nbytes();
    if (nbytes == 0) return;
    OnDevice on(src);
    DDP_CUDA_CHECK(
        cudaMemcpyAsync(host, src.data_ptr(), nbytes, cudaMemcpyDeviceToHost, native(on.stream)));
    if (!non_blocking) {
      DDP_CUDA_CHECK(cudaStreamSynchronize(native(on.stream)));
      detail::raise_deferred_device_error(src.device().index);  // Note [Deferred device errors]
    } else if (is_pinned(host)) {
      defer_pinned_reuse(host, on.stream);
    }
  }

  void fill(const Tensor& out, double value) override {
    OnDevice on(out);
    cuda_kernels::fill(out, value, on.stream);
  }
  void arange(const Tensor& out, double start, double step) override {
    OnDevice on(out);
    cuda_kernels::arange(out, start, step, on.stream);
  }

  void unary(UnaryOp op, const Tensor& in, const Tensor& out) override {
    OnDevice on(out);
    cuda_kernels::unary(op, in, out, on.stream);
  }
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                      const Tensor& dx) override {
    OnDevice on(dx);
    cuda_kernels::unary_backward(op, x, y, dy, dx, on.stream);
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    OnDevice on(out);
    cuda_kernels::binary(op, a, b, out, on.stream);
  }
  void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    OnDevice on(out);
    cuda_kernels::compare(op, a, b, out, on.stream);
  }
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override {
    OnDevice on(out);
    cuda_kernels::where(cond, a, b, out, on.stream);
  }

  void reduce_rows(ReductionOp op, const Tensor& in, const Tensor& out) override {
    OnDevice on(out);
    cuda_kernels::reduce_rows(op, in, out, on.stream);
  }
  void reduce_cols(ReductionOp op, const Tensor& in, const Tensor& out) override {
    OnDevice on(out);
    cuda_kernels::reduce_cols(op, in, out, on.stream);
  }
  void bmm(const Tensor& a, const Tensor& b, const Tensor& out) override {
    OnDevice on(out);
    cuda_kernels::bmm(a, b, out, on.stream);
  }

  void random(const Tensor& out, Distribution dist, double a, double b, uint64_t seed,
              uint64_t counter) override {
    OnDevice on(out);
    cuda_kernels::random(out, dist, a, b, seed, counter, on.stream);
  }

  void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) override {
    OnDevice on(out);
    cuda_kernels::gather(in, dim, index, out, on.stream);
  }
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index,
                   const Tensor& src) override {
    OnDevice on(out);
    cuda_kernels::scatter_add(out, dim, index, src, on.stream);
  }

  void synchronize(int device_index) override {
    CudaDeviceGuard guard(device_index);
    DDP_CUDA_CHECK(cudaDeviceSynchronize());
    detail::raise_deferred_device_error(device_index);  // Note [Deferred device errors]
  }
};

}  // namespace

namespace {
Backend& the_cuda_backend() {
  static CudaBackend backend;
  return backend;
}
const BackendRegistrar kRegistrar(DeviceType::CUDA, the_cuda_backend);
}  // namespace

}  // namespace ddp
