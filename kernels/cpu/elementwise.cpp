// Elementwise kernels (unary, unary_backward, binary, compare, where) on the
// CPU, instantiated from the X-macro lists of op_list.h and the functors of
// functors.h: adding an op there needs no edit here. See Note [One list per
// op family] and Note [CPU strided loops].

#include <tuple>
#include <utility>

#include "core/parallel.h"
#include "cpu/convert.h"
#include "cpu/kernels.h"
#include "cpu/strided.h"
#include "ddp/core/dispatch.h"
#include "ddp/tensor/functors.h"

namespace ddp::cpu_kernels {

namespace {

// One input operand: typed base pointer and strides.
template <class T>
struct In {
  const T* p;
  const Shape* strides;
};
template <class T>
In<T> in_of(const Tensor& t) {
  return {ptr<const T>(t), &t.strides()};
}

// Elements per thread below which a map stays on the calling thread (waking
// the second thread is not free; 32K floats are 128 KiB per operand).
constexpr int64_t kParallelGrain = 32768;

// True when a flat input read at index i while out is written at index i
// is safe in any order: the same memory as out (in place) or no overlap. An
// input shifted against out inside one buffer keeps the serial walk.
template <class T, class OutT>
bool flat_safe(const In<T>& in, const OutT* out, int64_t numel) {
  const auto* a = reinterpret_cast<const char*>(in.p);
  const auto* b = reinterpret_cast<const char*>(out);
  return a == b || a + numel * int64_t(sizeof(T)) <= b || b + numel * int64_t(sizeof(OutT)) <= a;
}

// out[i] = f(in0[i], in1[i], ...) over out's shape. f takes storage values
// and returns OutT. The unit-stride branch is the vectorizable fast path; two
// inputs also get one for "one side is a broadcast scalar" (x * 0.5 etc.).
template <class OutT, class F, class... Ts, size_t... I>
void map_impl(std::index_sequence<I...>, const Tensor& out, F& f, const In<Ts>&... ins) {
  constexpr size_t N = sizeof...(Ts) + 1;
  OutT* o = ptr<OutT>(out);
  auto body = [&](const RunInfo<N>& r) {
    OutT* y = o + r.offset[N - 1];
    const int64_t n = r.length;
    if (all_unit(r)) {
      const auto bases = std::make_tuple((ins.p + r.offset[I])...);
      for (int64_t i = 0; i < n; ++i) y[i] = f(std::get<I>(bases)[i]...);
      return;
    }
    if constexpr (N == 3) {
      if (r.stride[2] == 1) {
        const auto [pa, pb] = std::make_tuple((ins.p + r.offset[I])...);
        if (r.stride[0] == 0 && r.stride[1] == 1) {
          const auto av = *pa;
          for (int64_t i = 0; i < n; ++i) y[i] = f(av, pb[i]);
          return;
        }
        if (r.stride[0] == 1 && r.stride[1] == 0) {
          const auto bv = *pb;
          for (int64_t i = 0; i < n; ++i) y[i] = f(pa[i], bv);
          return;
        }
      }
    }
    const int64_t os = r.stride[N - 1];
    for (int64_t i = 0; i < n; ++i) y[i * os] = f(ins.p[r.offset[I] + i * r.stride[I]]...);
  };
  // Note [CPU flat operands]: a dense output whose inputs share its layout
  // (or are broadcast scalars) is one flat run, split over the threads.
  const Shape& shape = out.shape();
  const int64_t numel = out.numel();
  if (parallel_threads(numel, kParallelGrain) > 1 && is_dense(shape, out.strides()) &&
      ((all_zero(*ins.strides) ||
        (same_walk(shape, *ins.strides, out.strides()) && flat_safe(ins, o, numel))) &&
       ...)) {
    const std::array<int64_t, N - 1> step{(all_zero(*ins.strides) ? int64_t(0) : int64_t(1))...};
    parallel_for(numel, kParallelGrain, [&](int64_t begin, int64_t end) {
      RunInfo<N> r;
      for (size_t k = 0; k + 1 < N; ++k) r.offset[k] = begin * step[k], r.stride[k] = step[k];
      r.offset[N - 1] = begin;
      r.stride[N - 1] = 1;
      r.length = end - begin;
      body(r);
    });
    return;
  }
  for_each_run_in_memory_order<N>(shape, {ins.strides..., &out.strides()}, body);
}
template <class OutT, class F, class... Ts>
void map(const Tensor& out, F f, const In<Ts>&... ins) {
  map_impl<OutT>(std::index_sequence_for<Ts...>{}, out, f, ins...);
}

template <class Fn, class T>
void unary_kernel(const Tensor& in, const Tensor& out) {
  map<T>(
      out, [](T x) { return store<T>(Fn::forward(load(x))); }, in_of<T>(in));
}

template <class Fn, bool FloatOnly>
void unary_op(const char* name, const Tensor& in, const Tensor& out) {
  if constexpr (FloatOnly) {
    dispatch_floating(out.dtype(), name, [&]<class T>() { unary_kernel<Fn, T>(in, out); });
  } else {
    dispatch_numeric(out.dtype(), name, [&]<class T>() { unary_kernel<Fn, T>(in, out); });
  }
}

// Note [Unused backward inputs]
// A functor's backward may ignore x or y (exp needs only y, relu only x), so
// the frontend may pass an undefined tensor for the one it does not keep. It is
// read as a broadcast zero here.
template <class Fn, class T>
void unary_backward_kernel(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  // The usual case keeps only one of x and y (relu, exp): map over the two
  // defined operands, so the loop stays on the unit-stride (vectorized, flat)
  // paths instead of walking a stride-0 zero as a third operand.
  if (x.defined() != y.defined()) {
    const Tensor& kept = x.defined() ? x : y;
    const bool kept_is_x = x.defined();
    if (kept_is_x) {
      map<T>(
          dx, [](T xv, T dyv) { return store<T>(Fn::backward(load(xv), load(T{}), load(dyv))); },
          in_of<T>(kept), in_of<T>(dy));
    } else {
      map<T>(
          dx, [](T yv, T dyv) { return store<T>(Fn::backward(load(T{}), load(yv), load(dyv))); },
          in_of<T>(kept), in_of<T>(dy));
    }
    return;
  }
  static const T kZero{};
  const Shape zeros(dx.shape().size(), 0);
  auto maybe = [&](const Tensor& t) -> In<T> {
    return t.defined() ? in_of<T>(t) : In<T>{&kZero, &zeros};
  };
  map<T>(
      dx, [](T xv, T yv, T dyv) { return store<T>(Fn::backward(load(xv), load(yv), load(dyv))); },
      maybe(x), maybe(y), in_of<T>(dy));
}

template <class Fn>
void binary_op(const char* name, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_numeric(out.dtype(), name, [&]<class T>() {
    map<T>(
        out, [](T av, T bv) { return store<T>(Fn::apply(load(av), load(bv))); }, in_of<T>(a),
        in_of<T>(b));
  });
}

template <class Fn>
void compare_op(const char* name, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(a.dtype(), name, [&]<class T>() {
    map<bool>(
        out, [](T av, T bv) { return bool(Fn::apply(load(av), load(bv))); }, in_of<T>(a),
        in_of<T>(b));
  });
}

}  // namespace

void unary(UnaryOp op, const Tensor& in, const Tensor& out) {
  switch (op) {
#define DDP_UNARY_CASE(name, Fn, float_only)      \
  case UnaryOp::name:                             \
    unary_op<fn::Fn, float_only>(#name, in, out); \
    return;
    DDP_FOR_EACH_UNARY_OP(DDP_UNARY_CASE)
#undef DDP_UNARY_CASE
  }
  DDP_THROW(NotImplementedError, "unary: unknown op {} on the CPU", int(op));
}

void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                    const Tensor& dx) {
  switch (op) {
#define DDP_UNARY_BW_CASE(name, Fn, float_only)                                            \
  case UnaryOp::name:                                                                      \
    dispatch_floating(dx.dtype(), #name "_backward",                                       \
                      [&]<class T>() { unary_backward_kernel<fn::Fn, T>(x, y, dy, dx); }); \
    return;
    DDP_FOR_EACH_UNARY_OP(DDP_UNARY_BW_CASE)
#undef DDP_UNARY_BW_CASE
  }
  DDP_THROW(NotImplementedError, "unary_backward: unknown op {} on the CPU", int(op));
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
#define DDP_BINARY_CASE(name, Fn)        \
  case BinaryOp::name:                   \
    binary_op<fn::Fn>(#name, a, b, out); \
    return;
    DDP_FOR_EACH_BINARY_OP(DDP_BINARY_CASE)
#undef DDP_BINARY_CASE
  }
  DDP_THROW(NotImplementedError, "binary: unknown op {} on the CPU", int(op));
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
#define DDP_COMPARE_CASE(name, Fn)        \
  case CompareOp::name:                   \
    compare_op<fn::Fn>(#name, a, b, out); \
    return;
    DDP_FOR_EACH_COMPARE_OP(DDP_COMPARE_CASE)
#undef DDP_COMPARE_CASE
  }
  DDP_THROW(NotImplementedError, "compare: unknown op {} on the CPU", int(op));
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(out.dtype(), "where", [&]<class T>() {
    map<T>(
        out, [](bool c, T av, T bv) { return c ? av : bv; }, in_of<bool>(cond), in_of<T>(a),
        in_of<T>(b));
  });
}

}  // namespace ddp::cpu_kernels
