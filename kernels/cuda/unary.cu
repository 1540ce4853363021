// Unary elementwise ops and their backward on CUDA, instantiated from
// DDP_FOR_EACH_UNARY_OP and the functors of functors.h: adding an op there
// needs no edit here. See Note [One list per op family] in op_list.h and
// Note [CUDA elementwise paths] in elementwise.cuh.

#include "cuda/common.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/launchers.h"
#include "ddp/tensor/functors.h"

namespace ddp::cuda_kernels {

// Functors on storage types for launch_elementwise (Note [CUDA elementwise
// paths] in elementwise.cuh); they compute in compute_t<T>.
template <class Fn, class T>
struct UnaryElement {
  __device__ __forceinline__ T operator()(T x) const { return store<T>(Fn::forward(load(x))); }
};

// x or y may be undefined: a functor's backward may ignore one of them, and
// the frontend may then pass an undefined tensor (Note [Unused backward
// inputs] in kernels/cpu/elementwise.cpp). The launcher then reads dy in its
// place, which has the right shape and layout, and the functor sees zero.
template <class Fn, class T>
struct UnaryBackwardElement {
  bool has_x, has_y;
  __device__ __forceinline__ T operator()(T x, T y, T dy) const {
    using C = compute_t<T>;
    const C xv = has_x ? load(x) : C(0);
    const C yv = has_y ? load(y) : C(0);
    return store<T>(Fn::backward(xv, yv, load(dy)));
  }
};

template <class Fn, bool FloatOnly>
static void unary_op(const char* name, const Tensor& in, const Tensor& out, cuda::Stream stream) {
  auto launch = [&]<class T>() {
    launch_elementwise<T, T>("unary_kernel", UnaryElement<Fn, T>{}, stream, out, {&in});
  };
  if constexpr (FloatOnly) {
    dispatch_floating(out.dtype(), name, launch);
  } else {
    dispatch_numeric(out.dtype(), name, launch);
  }
}

template <class Fn>
static void unary_backward_op(const char* name, const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& dx, cuda::Stream stream) {
  dispatch_floating(dx.dtype(), name, [&]<class T>() {
    const Tensor& xs = x.defined() ? x : dy;
    const Tensor& ys = y.defined() ? y : dy;
    launch_elementwise<T, T, T, T>("unary_backward_kernel",
                                   UnaryBackwardElement<Fn, T>{x.defined(), y.defined()}, stream,
                                   dx, {&xs, &ys, &dy});
  });
}

void unary(UnaryOp op, const Tensor& in, const Tensor& out, cuda::Stream stream) {
  if (out.numel() == 0) return;
  switch (op) {
#define DDP_UNARY_CASE(name, Fn, float_only)              \
  case UnaryOp::name:                                     \
    unary_op<fn::Fn, float_only>(#name, in, out, stream); \
    return;
    DDP_FOR_EACH_UNARY_OP(DDP_UNARY_CASE)
#undef DDP_UNARY_CASE
  }
  DDP_THROW(NotImplementedError, "unary: unknown op {} on CUDA", int(op));
}

void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                    const Tensor& dx, cuda::Stream stream) {
  if (dx.numel() == 0) return;
  switch (op) {
#define DDP_UNARY_BW_CASE(name, Fn, float_only)                         \
  case UnaryOp::name:                                                   \
    unary_backward_op<fn::Fn>(#name "_backward", x, y, dy, dx, stream); \
    return;
    DDP_FOR_EACH_UNARY_OP(DDP_UNARY_BW_CASE)
#undef DDP_UNARY_BW_CASE
  }
  DDP_THROW(NotImplementedError, "unary_backward: unknown op {} on CUDA", int(op));
}

}  // namespace ddp::cuda_kernels
