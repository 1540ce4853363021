// Unary elementwise ops and their backward on CUDA, instantiated from
// DDP_FOR_EACH_UNARY_OP and the functors of functors.h: adding an op there
// needs no edit here. See Note [One list per op family] in op_list.h and
// Note [CUDA strided operands] in common.cuh.

#include "cuda/common.cuh"
#include "cuda/launchers.h"
#include "ddp/tensor/functors.h"

namespace ddp::cuda_kernels {

template <class Fn, class T>
static __global__ void unary_kernel(const T* in, T* out, Indexer<2> ix, int64_t n) {
  DDP_KERNEL_LOOP(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    out[off[1]] = store<T>(Fn::forward(load(in[off[0]])));
  }
}

// x or y may be null: a functor's backward may ignore one of them, and the
// frontend may then pass an undefined tensor (Note [Unused backward inputs] in
// kernels/cpu/elementwise.cpp). It reads as zero.
template <class Fn, class T>
static __global__ void unary_backward_kernel(const T* x, const T* y, const T* dy, T* dx,
                                             Indexer<4> ix, int64_t n) {
  using C = compute_t<T>;
  DDP_KERNEL_LOOP(i, n) {
    int64_t off[4];
    ix.offsets(i, off);
    const C xv = x ? load(x[off[0]]) : C(0);
    const C yv = y ? load(y[off[1]]) : C(0);
    dx[off[3]] = store<T>(Fn::backward(xv, yv, load(dy[off[2]])));
  }
}

template <class Fn, class T>
static void launch_unary(const Tensor& in, const Tensor& out, cuda::Stream stream) {
  const int64_t n = out.numel();
  unary_kernel<Fn, T><<<grid_for(n), kThreads, 0, native(stream)>>>(ptr<const T>(in), ptr<T>(out),
                                                            make_indexer(in, out), n);
  DDP_CUDA_CHECK_LAUNCH("unary_kernel");
}

template <class Fn, bool FloatOnly>
static void unary_op(const char* name, const Tensor& in, const Tensor& out, cuda::Stream stream) {
  if constexpr (FloatOnly) {
    dispatch_floating(out.dtype(), name, [&]<class T>() { launch_unary<Fn, T>(in, out, stream); });
  } else {
    dispatch_numeric(out.dtype(), name, [&]<class T>() { launch_unary<Fn, T>(in, out, stream); });
  }
}

template <class Fn>
static void unary_backward_op(const char* name, const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& dx, cuda::Stream stream) {
  dispatch_floating(dx.dtype(), name, [&]<class T>() {
    const int64_t n = dx.numel();
    // An undefined x or y gets all-zero strides (it is never read).
    const Shape zeros(dx.shape().size(), 0);
    const Shape& xs = x.defined() ? x.strides() : zeros;
    const Shape& ys = y.defined() ? y.strides() : zeros;
    const Indexer<4> ix = make_indexer<4>(dx.shape(), {&xs, &ys, &dy.strides(), &dx.strides()});
    const T* xp = x.defined() ? ptr<const T>(x) : nullptr;
    const T* yp = y.defined() ? ptr<const T>(y) : nullptr;
    unary_backward_kernel<Fn, T>
        <<<grid_for(n), kThreads, 0, native(stream)>>>(xp, yp, ptr<const T>(dy), ptr<T>(dx), ix, n);
    DDP_CUDA_CHECK_LAUNCH("unary_backward_kernel");
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
