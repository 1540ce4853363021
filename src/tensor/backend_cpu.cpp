// The CPU backend: host memory plus the kernels of kernels/cpu/. This file
// only forwards; see kernels/cpu/kernels.h for the kernel families.

#include <cstdint>
#include <cstdlib>

#include "cpu/kernels.h"
#include "ddp/tensor/backend.h"

namespace ddp {

namespace {

// Note [Host allocation alignment]
// Host storage is 64-byte aligned (a cache line, and the widest SIMD load),
// so contiguous kernels and BLAS start on aligned data. aligned_alloc wants
// the size to be a multiple of the alignment; 0 bytes still gets a real,
// freeable block so every Storage has a non-null pointer.
constexpr size_t kHostAlignment = 64;

class CpuBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::CPU; }

  Storage allocate(size_t nbytes, int /*device_index*/) override {
    const size_t rounded = (nbytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    void* p = nbytes > SIZE_MAX - kHostAlignment
                  ? nullptr
                  : std::aligned_alloc(kHostAlignment, rounded == 0 ? kHostAlignment : rounded);
    if (p == nullptr)
      DDP_THROW(OutOfMemoryError, "CPU allocator: could not allocate {} bytes of host memory",
                nbytes);
    return Storage(p, nbytes, Device::cpu(), [](void* q) { std::free(q); });
  }

  void copy(const Tensor& src, const Tensor& dst) override { cpu_kernels::copy(src, dst); }
  void fill(const Tensor& out, double value) override { cpu_kernels::fill(out, value); }
  void arange(const Tensor& out, double start, double step) override {
    cpu_kernels::arange(out, start, step);
  }

  void unary(UnaryOp op, const Tensor& in, const Tensor& out) override { cpu_kernels::unary(op, in, out); }
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                      const Tensor& dx) override {
    cpu_kernels::unary_backward(op, x, y, dy, dx);
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    cpu_kernels::binary(op, a, b, out);
  }
  void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    cpu_kernels::compare(op, a, b, out);
  }
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override {
    cpu_kernels::where(cond, a, b, out);
  }

  void reduce_rows(ReduceOp op, const Tensor& in, const Tensor& out) override {
    cpu_kernels::reduce_rows(op, in, out);
  }
  void bmm(const Tensor& a, const Tensor& b, const Tensor& out) override { cpu_kernels::bmm(a, b, out); }

  void random(const Tensor& out, Distribution dist, double a, double b, uint64_t seed,
              uint64_t counter) override {
    cpu_kernels::random(out, dist, a, b, seed, counter);
  }

  void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) override {
    cpu_kernels::gather(in, dim, index, out);
  }
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index,
                   const Tensor& src) override {
    cpu_kernels::scatter_add(out, dim, index, src);
  }

  // CPU kernels run synchronously on the calling thread.
  void synchronize(int /*device_index*/) override {}
};

}  // namespace

// The CPU backend always exists, so it needs no registration.
Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace ddp
