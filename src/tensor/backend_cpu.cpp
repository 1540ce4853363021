// The CPU backend: host memory plus the kernels of kernels/cpu/. This file
// only forwards; see kernels/cpu/kernels.h for the kernel families.

#include <cstdint>
#include <cstdlib>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

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

// Note [Host heap trimming]
// A training step frees and re-allocates the same activations, scratch
// buffers and gradients every iteration. glibc returns the top of its heap
// to the kernel once more than M_TRIM_THRESHOLD bytes are free there, and it
// only raises that threshold (to twice the largest freed mmap'ed block, at
// most 64 MiB) as a side effect of freeing a big block. So whether a step
// pays page faults for a few dozen megabytes depends on accidents of the
// program's history: a DDP whose buckets were rebuilt (freeing the old
// buffers) kept its heap; a ZeRO-1 job (rebuild_buckets off) with the same
// step trimmed and regrew ~19 MiB several times a step (brk calls, page
// faults in the convolution kernels' scratch memory, about 20 ms a step on
// ResNet-18 32x32, batch 32). The first host allocation therefore fixes the
// thresholds at the values the dynamic rule would reach: blocks up to 32 MiB
// come from the heap, and up to 64 MiB of free heap top is kept. A user who
// sets MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ keeps their choice.
void settle_host_heap() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) return;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
  });
#endif
}

class CpuBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::CPU; }

  Storage allocate(size_t nbytes, int /*device_index*/) override {
    settle_host_heap();  // Note [Host heap trimming]
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

  void reduce_rows(ReductionOp op, const Tensor& in, const Tensor& out) override {
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
