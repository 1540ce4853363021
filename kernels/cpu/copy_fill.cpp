// copy (with dtype cast), fill and arange on the CPU.

#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "cpu/convert.h"
#include "cpu/kernels.h"
#include "cpu/strided.h"
#include "ddp/core/dispatch.h"

namespace ddp::cpu_kernels {

namespace {

// Elements per thread below which a copy stays on the calling thread.
constexpr int64_t kCopyGrain = 65536;

template <class S, class D>
void copy_kernel(const Tensor& src, const Tensor& dst) {
  const S* s = ptr<const S>(src);
  D* d = ptr<D>(dst);
  const std::array<const Shape*, 2> strides{&src.strides(), &dst.strides()};
  auto body = [&](const RunInfo<2>& r) {
    const S* sp = s + r.offset[0];
    D* dp = d + r.offset[1];
    const int64_t n = r.length;
    if constexpr (std::is_same_v<S, D>) {
      if (all_unit(r)) {
        std::memcpy(dp, sp, size_t(n) * sizeof(S));
        return;
      }
    } else {
      if (all_unit(r)) {
        for (int64_t i = 0; i < n; ++i) dp[i] = cast_to<D>(sp[i]);
        return;
      }
    }
    const int64_t ss = r.stride[0], ds = r.stride[1];
    for (int64_t i = 0; i < n; ++i) dp[i * ds] = cast_to<D>(sp[i * ss]);
  };
  // Note [CPU flat operands]: same dense layout on both sides is one flat
  // run, split over the threads (Note [CPU parallel loops]).
  const int64_t numel = dst.numel();
  if (parallel_threads(numel, kCopyGrain) > 1 && is_dense(dst.shape(), dst.strides()) &&
      same_walk(dst.shape(), src.strides(), dst.strides())) {
    parallel_for(numel, kCopyGrain, [&](int64_t begin, int64_t end) {
      body(RunInfo<2>{{begin, begin}, {1, 1}, end - begin});
    });
    return;
  }
  for_each_run_in_memory_order<2>(dst.shape(), strides, body);
}

}  // namespace

void copy(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  dispatch_all(src.dtype(), "copy", [&]<class S>() {
    dispatch_all(dst.dtype(), "copy", [&]<class D>() { copy_kernel<S, D>(src, dst); });
  });
}

void fill(const Tensor& out, double value) {
  if (out.numel() == 0) return;
  dispatch_all(out.dtype(), "fill", [&]<class T>() {
    const T v = cast_to<T>(value);
    T* p = ptr<T>(out);
    for_each_run_in_memory_order<1>(out.shape(), {&out.strides()}, [&](const RunInfo<1>& r) {
      T* q = p + r.offset[0];
      if (r.stride[0] == 1) {
        std::fill(q, q + r.length, v);
      } else {
        for (int64_t i = 0; i < r.length; ++i) q[i * r.stride[0]] = v;
      }
    });
  });
}

void arange(const Tensor& out, double start, double step) {
  // Each element is computed from its index (not by repeated addition), in
  // double, and rounded once, so long ranges do not drift.
  dispatch_numeric(out.dtype(), "arange", [&]<class T>() {
    T* p = ptr<T>(out);
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = cast_to<T>(start + double(i) * step);
  });
}

}  // namespace ddp::cpu_kernels
