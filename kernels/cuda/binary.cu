// Binary elementwise ops, comparisons and where on CUDA, instantiated from
// DDP_FOR_EACH_BINARY_OP / DDP_FOR_EACH_COMPARE_OP and functors.h. See Note
// [One list per op family] in op_list.h and Note [CUDA strided operands] in
// common.cuh.

#include "cuda/common.cuh"
#include "cuda/launchers.h"
#include "ddp/tensor/functors.h"

namespace ddp::cuda_kernels {

template <class Fn, class T>
static __global__ void binary_kernel(const T* a, const T* b, T* out, Indexer<3> ix, int64_t n) {
  DDP_KERNEL_LOOP(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    out[off[2]] = store<T>(Fn::apply(load(a[off[0]]), load(b[off[1]])));
  }
}

template <class Fn, class T>
static __global__ void compare_kernel(const T* a, const T* b, bool* out, Indexer<3> ix, int64_t n) {
  DDP_KERNEL_LOOP(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    out[off[2]] = bool(Fn::apply(load(a[off[0]]), load(b[off[1]])));
  }
}

template <class T>
static __global__ void where_kernel(const bool* cond, const T* a, const T* b, T* out, Indexer<4> ix,
                                    int64_t n) {
  DDP_KERNEL_LOOP(i, n) {
    int64_t off[4];
    ix.offsets(i, off);
    out[off[3]] = cond[off[0]] ? a[off[1]] : b[off[2]];
  }
}

template <class Fn>
static void binary_op(const char* name, const Tensor& a, const Tensor& b, const Tensor& out,
                      cuda::Stream stream) {
  const int64_t n = out.numel();
  const Indexer<3> ix = make_indexer(a, b, out);
  dispatch_numeric(out.dtype(), name, [&]<class T>() {
    binary_kernel<Fn, T><<<grid_for(n), kThreads, 0, native(stream)>>>(ptr<const T>(a), ptr<const T>(b),
                                                               ptr<T>(out), ix, n);
    DDP_CUDA_CHECK_LAUNCH("binary_kernel");
  });
}

template <class Fn>
static void compare_op(const char* name, const Tensor& a, const Tensor& b, const Tensor& out,
                       cuda::Stream stream) {
  const int64_t n = out.numel();
  const Indexer<3> ix = make_indexer(a, b, out);
  dispatch_all(a.dtype(), name, [&]<class T>() {
    compare_kernel<Fn, T><<<grid_for(n), kThreads, 0, native(stream)>>>(ptr<const T>(a), ptr<const T>(b),
                                                                ptr<bool>(out), ix, n);
    DDP_CUDA_CHECK_LAUNCH("compare_kernel");
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, cuda::Stream stream) {
  if (out.numel() == 0) return;
  switch (op) {
#define DDP_BINARY_CASE(name, Fn)                \
  case BinaryOp::name:                           \
    binary_op<fn::Fn>(#name, a, b, out, stream); \
    return;
    DDP_FOR_EACH_BINARY_OP(DDP_BINARY_CASE)
#undef DDP_BINARY_CASE
  }
  DDP_THROW(NotImplementedError, "binary: unknown op {} on CUDA", int(op));
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out,
             cuda::Stream stream) {
  if (out.numel() == 0) return;
  switch (op) {
#define DDP_COMPARE_CASE(name, Fn)                \
  case CompareOp::name:                           \
    compare_op<fn::Fn>(#name, a, b, out, stream); \
    return;
    DDP_FOR_EACH_COMPARE_OP(DDP_COMPARE_CASE)
#undef DDP_COMPARE_CASE
  }
  DDP_THROW(NotImplementedError, "compare: unknown op {} on CUDA", int(op));
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out,
           cuda::Stream stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const Indexer<4> ix = make_indexer(cond, a, b, out);
  dispatch_all(out.dtype(), "where", [&]<class T>() {
    where_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(ptr<const bool>(cond), ptr<const T>(a),
                                                          ptr<const T>(b), ptr<T>(out), ix, n);
    DDP_CUDA_CHECK_LAUNCH("where_kernel");
  });
}

}  // namespace ddp::cuda_kernels
