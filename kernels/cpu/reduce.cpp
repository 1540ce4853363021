// Row reductions on the CPU: in [rows, cols] contiguous -> out [rows].

#include <type_traits>

#include "cpu/convert.h"
#include "cpu/kernels.h"
#include "cpu/strided.h"
#include "ddp/core/dispatch.h"

namespace ddp::cpu_kernels {

namespace {

// Note [CPU float sums]
// Floating rows are summed pairwise in the compute type: blocks of up to 128
// elements with 8 independent accumulators (vectorizable), combined as a
// binary tree. The rounding error then grows like log(n) instead of n, which
// keeps f32 sums of long rows close to the GPU's tree reduction without
// computing in double.
template <class T, class C = compute_t<T>>
C pairwise_sum(const T* p, int64_t n) {
  constexpr int64_t kBlock = 128;
  if (n <= kBlock) {
    C acc[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; ++k) acc[k] += load(p[i + k]);
    C tail = 0;
    for (; i < n; ++i) tail += load(p[i]);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
  }
  // Split at a multiple of the block so the leaves stay full.
  const int64_t half = ((n / 2 + kBlock - 1) / kBlock) * kBlock;
  return pairwise_sum<T, C>(p, half) + pairwise_sum<T, C>(p + half, n - half);
}

// Integers and bool sum exactly into int64 (wrapping on overflow, computed
// unsigned so that wrapping is defined).
template <class T>
int64_t int_sum(const T* p, int64_t n) {
  uint64_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += uint64_t(int64_t(p[i]));
  return int64_t(s);
}

// max (IsMax) or min of a row; the first NaN wins, like torch.
template <bool IsMax, class T>
T extreme(const T* p, int64_t n) {
  using C = compute_t<T>;
  C m = load(p[0]);
  if (m != m) return p[0];
  for (int64_t i = 1; i < n; ++i) {
    const C v = load(p[i]);
    if (v != v) return p[i];
    if (IsMax ? v > m : v < m) m = v;
  }
  return store<T>(m);
}

// Index of the first extreme; a NaN counts as the extreme (first NaN wins).
template <bool IsMax, class T>
int64_t arg_extreme(const T* p, int64_t n) {
  using C = compute_t<T>;
  C m = load(p[0]);
  if (m != m) return 0;
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    const C v = load(p[i]);
    if (v != v) return i;
    if (IsMax ? v > m : v < m) {
      m = v;
      best = i;
    }
  }
  return best;
}

template <class T, class OutT, class RowFn>
void for_rows(const Tensor& in, const Tensor& out, RowFn row_fn) {
  const int64_t rows = in.shape()[0], cols = in.shape()[1];
  const T* p = ptr<const T>(in);
  OutT* o = ptr<OutT>(out);
  for (int64_t r = 0; r < rows; ++r) o[r] = row_fn(p + r * cols, cols);
}

}  // namespace

void reduce_rows(ReductionOp op, const Tensor& in, const Tensor& out) {
  switch (op) {
    case ReductionOp::sum:
      dispatch_all(in.dtype(), "sum", [&]<class T>() {
        if constexpr (is_float_like<T>) {
          for_rows<T, T>(in, out,
                         [](const T* p, int64_t n) { return store<T>(pairwise_sum(p, n)); });
        } else {
          for_rows<T, int64_t>(in, out, [](const T* p, int64_t n) { return int_sum(p, n); });
        }
      });
      return;
    case ReductionOp::max:
      dispatch_all(in.dtype(), "max", [&]<class T>() {
        for_rows<T, T>(in, out, [](const T* p, int64_t n) { return extreme<true>(p, n); });
      });
      return;
    case ReductionOp::min:
      dispatch_all(in.dtype(), "min", [&]<class T>() {
        for_rows<T, T>(in, out, [](const T* p, int64_t n) { return extreme<false>(p, n); });
      });
      return;
    case ReductionOp::argmax:
      dispatch_all(in.dtype(), "argmax", [&]<class T>() {
        for_rows<T, int64_t>(in, out,
                             [](const T* p, int64_t n) { return arg_extreme<true>(p, n); });
      });
      return;
    case ReductionOp::argmin:
      dispatch_all(in.dtype(), "argmin", [&]<class T>() {
        for_rows<T, int64_t>(in, out,
                             [](const T* p, int64_t n) { return arg_extreme<false>(p, n); });
      });
      return;
  }
  DDP_THROW(NotImplementedError, "reduce_rows: unknown op {} on the CPU", int(op));
}

}  // namespace ddp::cpu_kernels
