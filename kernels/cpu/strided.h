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
//
// Note [CPU transposed operands]
// When one operand is transposed relative to the others (copying x.t() into
// a dense tensor, a permuted attention layout), walking it along the run
// touches a new cache line per element, and power-of-two strides make those
// lines evict each other (a 2048x2048 f32 transposed copy: 118 ms row by row,
// 50 ms in tiles on the 2-core dev VM). So for_each_run then walks the run dim
// and that operand's unit-stride dim in 32x32 tiles (runs of <= 32), reusing
// each touched line while it is cached. Only the visiting order changes.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "ddp/tensor/backend.h"

namespace ddp::cpu_kernels {

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
  DDP_CHECK_T(ShapeError, ndim_in <= kMaxDims, "cpu kernel: {} dims exceed kMaxDims = {}", ndim_in,
              kMaxDims);
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
  for (size_t k = 0; k < N; ++k) run.stride[k] = st[k][last];

  // See Note [CPU transposed operands]: find an operand that strides through
  // memory along the run but is unit-stride along an outer dim, and move that
  // dim next to the run so the two can be walked in tiles.
  bool tiled = false;
  for (size_t k = 0; k < N && !tiled && merged >= 2; ++k) {
    if (st[k][last] <= 1) continue;
    for (int d = last - 1; d >= first; --d) {
      if (st[k][d] != 1) continue;
      const int64_t moved_size = size[d];
      int64_t moved_st[N];
      for (size_t j = 0; j < N; ++j) moved_st[j] = st[j][d];
      for (int e = d; e < last - 1; ++e) {
        size[e] = size[e + 1];
        for (size_t j = 0; j < N; ++j) st[j][e] = st[j][e + 1];
      }
      size[last - 1] = moved_size;
      for (size_t j = 0; j < N; ++j) st[j][last - 1] = moved_st[j];
      tiled = true;
      break;
    }
  }
  const int outer_end = tiled ? last - 1 : last;  // the odometer walks [first, outer_end)
  int64_t outer = 1;
  for (int d = first; d < outer_end; ++d) outer *= size[d];

  std::array<int64_t, N> base{};
  int64_t idx[kMaxDims] = {};
  for (int64_t o = 0; o < outer; ++o) {
    if (!tiled) {
      run.offset = base;
      run.length = size[last];
      body(run);
    } else {
      constexpr int64_t kTile = 32;
      const int64_t rows = size[last - 1], cols = size[last];
      for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
        const int64_t r1 = r0 + kTile < rows ? r0 + kTile : rows;
        for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
          run.length = c0 + kTile < cols ? kTile : cols - c0;
          for (int64_t r = r0; r < r1; ++r) {
            for (size_t k = 0; k < N; ++k)
              run.offset[k] = base[k] + r * st[k][last - 1] + c0 * st[k][last];
            body(run);
          }
        }
      }
    }
    // Odometer over the outer dims, innermost first.
    for (int d = outer_end - 1; d >= first; --d) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) base[k] += st[k][d];
      if (idx[d] < size[d]) break;
      for (size_t k = 0; k < N; ++k) base[k] -= st[k][d] * size[d];
      idx[d] = 0;
    }
  }
}

// Note [CPU memory order]
// for_each_run walks dims in logical order, so for channels-last operands
// ([N, C, H, W] with C innermost in memory) every run would stride by C.
// Elementwise kernels, whose result does not depend on the visiting order,
// call this instead: it first orders the dims by the last operand's strides
// (the output's), outermost in memory first, as torch's TensorIterator
// does, so operands that share a dense layout become one unit-stride run.
template <size_t N, class Body>
void for_each_run_in_memory_order(const Shape& shape, const std::array<const Shape*, N>& strides,
                                  Body&& body) {
  const Shape& key = *strides[N - 1];
  const size_t nd = shape.size();
  bool ordered = true;  // already outermost-first (size-1 dims do not count)
  int64_t prev = -1;
  for (size_t d = 0; d < nd && ordered; ++d) {
    if (shape[d] == 1) continue;
    ordered = prev < 0 || key[d] <= prev;
    prev = key[d];
  }
  if (ordered || nd > size_t(kMaxDims)) {
    for_each_run<N>(shape, strides, body);
    return;
  }
  std::array<size_t, kMaxDims> order{};
  for (size_t d = 0; d < nd; ++d) order[d] = d;
  std::stable_sort(order.begin(), order.begin() + nd,
                   [&](size_t a, size_t b) { return key[a] > key[b]; });
  Shape sorted_shape(nd);
  std::array<Shape, N> sorted_strides;
  for (size_t k = 0; k < N; ++k) sorted_strides[k].resize(nd);
  for (size_t d = 0; d < nd; ++d) {
    sorted_shape[d] = shape[order[d]];
    for (size_t k = 0; k < N; ++k) sorted_strides[k][d] = (*strides[k])[order[d]];
  }
  std::array<const Shape*, N> ptrs;
  for (size_t k = 0; k < N; ++k) ptrs[k] = &sorted_strides[k];
  for_each_run<N>(sorted_shape, ptrs, body);
}

// Note [CPU flat operands]
// A tensor is "dense" when its elements fill numel consecutive slots from
// data_ptr() in some dim order (contiguous, channels-last, any permutation
// without gaps). Operands that are dense with the same strides as the
// output (size-1 dims aside) line up element for element in memory, so an
// element-wise kernel may treat them as flat arrays and split the flat
// range over threads (Note [CPU parallel loops]).
inline bool is_dense(const Shape& shape, const Shape& strides) {
  std::array<std::pair<int64_t, int64_t>, kMaxDims> dims{};  // (stride, size)
  size_t nd = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return true;
    if (shape[d] == 1) continue;
    if (nd == dims.size()) return false;
    dims[nd++] = {strides[d], shape[d]};
  }
  std::sort(dims.begin(), dims.begin() + nd, [](auto a, auto b) { return a.first > b.first; });
  int64_t expected = 1;
  for (size_t d = nd; d-- > 0;) {
    if (dims[d].first != expected) return false;
    expected *= dims[d].second;
  }
  return true;
}

// True when `strides` walks `shape` exactly like `like` does (size-1 dims,
// whose stride is never used, aside).
inline bool same_walk(const Shape& shape, const Shape& strides, const Shape& like) {
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && strides[d] != like[d]) return false;
  return true;
}

// True when every stride is 0 (a broadcast scalar).
inline bool all_zero(const Shape& strides) {
  for (int64_t s : strides)
    if (s != 0) return false;
  return true;
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

}  // namespace ddp::cpu_kernels
