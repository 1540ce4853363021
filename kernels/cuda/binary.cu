// Binary elementwise ops, comparisons and where on CUDA, instantiated from
// DDP_FOR_EACH_BINARY_OP / DDP_FOR_EACH_COMPARE_OP and functors.h. See Note
// [One list per op family] in op_list.h and Note [CUDA elementwise paths] in
// elementwise.cuh.

#include "cuda/common.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/launchers.h"
#include "ddp/tensor/functors.h"

namespace ddp::cuda_kernels {

// Functors on storage types for launch_elementwise (Note [CUDA elementwise
// paths] in elementwise.cuh); they compute in compute_t<T>.
template <class Fn, class T>
struct BinaryElement {
  __device__ __forceinline__ T operator()(T a, T b) const {
    return store<T>(Fn::apply(load(a), load(b)));
  }
};

template <class Fn, class T>
struct CompareElement {
  __device__ __forceinline__ bool operator()(T a, T b) const {
    return bool(Fn::apply(load(a), load(b)));
  }
};

template <class T>
struct WhereElement {
  __device__ __forceinline__ T operator()(bool c, T a, T b) const { return c ? a : b; }
};

template <class Fn>
static void binary_op(const char* name, const Tensor& a, const Tensor& b, const Tensor& out,
                      cuda::Stream stream) {
  dispatch_numeric(out.dtype(), name, [&]<class T>() {
    launch_elementwise<T, T, T>("binary_kernel", BinaryElement<Fn, T>{}, stream, out, {&a, &b});
  });
}

template <class Fn>
static void compare_op(const char* name, const Tensor& a, const Tensor& b, const Tensor& out,
                       cuda::Stream stream) {
  dispatch_all(a.dtype(), name, [&]<class T>() {
    launch_elementwise<bool, T, T>("compare_kernel", CompareElement<Fn, T>{}, stream, out,
                                   {&a, &b});
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
  dispatch_all(out.dtype(), "where", [&]<class T>() {
    launch_elementwise<T, bool, T, T>("where_kernel", WhereElement<T>{}, stream, out,
                                      {&cond, &a, &b});
  });
}

}  // namespace ddp::cuda_kernels
