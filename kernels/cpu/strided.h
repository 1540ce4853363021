#pragma once
// Strided iteration for the CPU kernels.
//
// Note [CPU strided loops]
// A kernel over N operands that share one shape, each with its own strides
// (in elements, >= 0, 0 for broadcast dims), calls for_each_run(). It visits
// the elements as "runs": maximal 1-D stretches along the innermost remaining
// dim, and hands the body the element offset of each operand at the start of
// the run, the run length and each operand's stride along it. Before looping
// it drops size-1 dims and merges neighbouring dims that every operand walks
// as one (stride[d] == stride[d+1] * size[d+1]), so all-contiguous operands
// become a single run of numel elements with unit strides: that is the fast
// path, and the body's unit-stride branch is a plain loop the compiler
// vectorizes. Broadcast operands keep stride 0 inside a run.

#include <array>
#include <cstddef>
#include <cstdint>

#include "ddp/tensor/backend.h"

namespace ddp::cpu {

template <size_t N>
struct RunInfo {
  std::array<int64_t, N> offset;  // element offset of the run's first element, per operand
  std::array<int64_t, N> stride;  // element stride along the run, per operand
  int64_t length;
};

// Calls body(const RunInfo<N>&) for every run; nothing when any size is 0.
// A 0-dim shape is one run of length 1.
template <size_t N, class Body>
void for_each_run(const Shape& shape, const std::array<const Shape*, N>& strides, Body&& body) {
  const int ndim_in = int(shape.size());
  int64_t size[kMaxDims];
  int64_t st[N][kMaxDims];
  int nd = 0;
  for (int d = 0; d < ndim_in; ++d) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    size[nd] = shape[d];
    for (size_t k = 0; k < N; ++k) st[k][nd] = (*strides[k])[d];
    ++nd;
  }
  // Merge dim d into the (already merged) inner dim when every operand allows it.
  int merged = 0;
  for (int d = nd - 1; d >= 0; --d) {
    if (merged > 0) {
      const int inner = kMaxDims - merged;  // merged dims are stacked at the end
      bool ok = true;
      for (size_t k = 0; k < N; ++k) ok = ok && st[k][d] == st[k][inner] * size[inner];
      if (ok) {
        size[inner] *= size[d];
        continue;
      }
    }
    ++merged;
    const int slot = kMaxDims - merged;
    size[slot] = size[d];
    for (size_t k = 0; k < N; ++k) st[k][slot] = st[k][d];
  }
  const int first = kMaxDims - merged;  // dims live in [first, kMaxDims)

  RunInfo<N> run{};
  if (merged == 0) {  // every dim had size 1
    run.length = 1;
    body(run);
    return;
  }
  const int last = kMaxDims - 1;
  run.length = size[last];
  for (size_t k = 0; k < N; ++k) run.stride[k] = st[k][last];
  int64_t outer = 1;
  for (int d = first; d < last; ++d) outer *= size[d];

  int64_t idx[kMaxDims] = {};
  for (int64_t o = 0; o < outer; ++o) {
    body(run);
    // Odometer over the outer dims, innermost first.
    for (int d = last - 1; d >= first; --d) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) run.offset[k] += st[k][d];
      if (idx[d] < size[d]) break;
      for (size_t k = 0; k < N; ++k) run.offset[k] -= st[k][d] * size[d];
      idx[d] = 0;
    }
  }
}

// True when every stride of the run is 1 (the vectorizable case).
template <size_t N>
inline bool all_unit(const RunInfo<N>& r) {
  for (size_t k = 0; k < N; ++k)
    if (r.stride[k] != 1) return false;
  return true;
}

// Typed element pointer of a tensor view (data_ptr() already includes the offset).
template <class T>
inline T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

}  // namespace ddp::cpu
