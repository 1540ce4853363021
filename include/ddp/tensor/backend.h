#pragma once
// Backend: the kernels one device type provides. The ops frontend (src/ops/)
// checks arguments, broadcasts, promotes dtypes, allocates outputs and records
// autograd; then it calls exactly one Backend method per kernel. So a backend
// never validates user input: the frontend guarantees what each method's
// comment states. See Note [One list per op family] in op_list.h.
//
// Common guarantees: all tensors passed to one call are on this backend's
// device (same index); "same shape" means identical shape vectors; strides
// are arbitrary (including 0 for broadcast dims and negative never) unless a
// method says "contiguous"; numel may be 0 (then the kernel does nothing).
// At most kMaxDims dims. CUDA kernels run on the current stream of the device.

#include <cstdint>

#include "ddp/core/device.h"
#include "ddp/tensor/op_list.h"
#include "ddp/tensor/storage.h"
#include "ddp/tensor/tensor.h"

namespace ddp {

inline constexpr int kMaxDims = 8;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;

  // Memory. allocate() may throw OutOfMemoryError.
  virtual Storage allocate(size_t nbytes, int device_index) = 0;

  // dst = cast(src): same shape, any dtypes, both on this device.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  // Between a contiguous host buffer and a contiguous tensor of this device
  // (same dtype, nbytes = dst.nbytes()). non_blocking: enqueue on the current
  // stream and return; the backend keeps the host buffer alive/stages it so
  // the caller may free it at once. Only the CUDA backend implements these.
  virtual void copy_from_host(const void* host, const Tensor& dst, bool non_blocking);
  virtual void copy_to_host(const Tensor& src, void* host, bool non_blocking);

  // out[...] = value (cast to out's dtype).
  virtual void fill(const Tensor& out, double value) = 0;
  // out (1-D, contiguous, numeric) [i] = start + i * step.
  virtual void arange(const Tensor& out, double start, double step) = 0;

  // out = f(in); same shape and dtype. Floating dtypes for float_only ops.
  virtual void unary(UnaryOp op, const Tensor& in, const Tensor& out) = 0;
  // dx = f'(x) * dy, using y = f(x) where the functor needs it; same shape/dtype, floating.
  // x or y may be undefined when the functor does not read it (the frontend
  // then saves less for backward); see Note [Unused backward inputs].
  virtual void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& dx) = 0;
  // out = a (op) b; a, b, out same shape and dtype (not bool).
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = a (op) b as bool; a, b same shape and dtype; out bool, same shape.
  virtual void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = cond ? a : b; all same shape; cond bool; a, b, out one dtype.
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;

  // in [rows, cols] contiguous, out [rows] contiguous. sum/max/min: out has
  // in's dtype (sum of integers/bool accumulates in i64 and out is i64);
  // argmax/argmin: out i64, first index of the extreme; NaN counts as the
  // maximum (and minimum) like torch. cols >= 1 for max/min/arg*.
  virtual void reduce_rows(ReductionOp op, const Tensor& in, const Tensor& out) = 0;
  // The same over the outer dim: in [rows, cols] contiguous, out [cols]
  // contiguous, out[c] = op over in[:, c] (index = row for argmax/argmin).
  // rows >= 1 for max/min/arg*. The default copies in transposed and calls
  // reduce_rows; CUDA reads in as it lies (Note [CUDA column reductions]).
  virtual void reduce_cols(ReductionOp op, const Tensor& in, const Tensor& out);

  // out[b] = a[b] @ bm[b]: a [B, M, K], bm [B, K, N], out [B, M, N] contiguous;
  // one floating dtype. a and bm are each "row-major" (stride(-1) == 1) or
  // "column-major" (stride(-2) == 1) in their last two dims, with any batch
  // stride (0 allowed). f16/bf16 accumulate in f32.
  virtual void bmm(const Tensor& a, const Tensor& bm, const Tensor& out) = 0;

  // out (contiguous, floating) filled from Philox (see Note [Counter-based
  // RNG]): element i uses Philox4x32::draw(seed, counter + i). uniform: a +
  // (b - a) * u; normal: mean a, std b, by Box-Muller. The exact formulas,
  // which both backends follow bit for bit, are in Note [Random formulas]
  // (kernels/cpu/random.cpp).
  enum class Distribution { uniform, normal };
  virtual void random(const Tensor& out, Distribution dist, double a, double b, uint64_t seed,
                      uint64_t counter) = 0;

  // out = in.gather(dim, index): index (i32/i64) and out have the same shape;
  // in has the same ndim and size >= index's along every dim except dim.
  // Index values are already range-checked. index strides may be 0.
  virtual void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) = 0;
  // out.scatter_add_(dim, index, src): index and src same shape; out like in
  // gather. Duplicate indices accumulate (atomics on GPU). Floating or
  // integer dtypes.
  virtual void scatter_add(const Tensor& out, int64_t dim, const Tensor& index,
                           const Tensor& src) = 0;

  // Waits until all work queued on this device is done.
  virtual void synchronize(int device_index) = 0;
};

// The backend of a device type. Throws DeviceError for CUDA when libddp was
// built without CUDA or no usable GPU is present.
Backend& backend_for(DeviceType type);
inline Backend& backend_for(Device d) { return backend_for(d.type); }

// The backends register themselves (src/tensor/backend_cpu.cpp and, in a CUDA
// build, src/tensor/backend_cuda.cpp) with a function that returns the one
// instance, so a build without CUDA simply has no CUDA backend.
using BackendGetter = Backend& (*)();
struct BackendRegistrar {
  BackendRegistrar(DeviceType type, BackendGetter getter);
};
Backend& cpu_backend();
Backend* cuda_backend();  // nullptr when built without CUDA

}  // namespace ddp
