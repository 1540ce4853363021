// Embedding lookup and its gradient on the CPU (contract in
// kernels/kernel_list.h). Indices are checked before anything is written, and
// a bad one raises at once; the CUDA kernels defer the same check (Note
// [Deferred device errors]).
//
// Note [Deterministic embedding gradient]
// The gradient of a weight row is the sum of the dy rows of every position
// that looked it up. Both backends sum each weight row's contributions in
// the compute type in increasing position order (here: a stable sort of the
// positions by index; on CUDA: a stable radix sort), then round once, so
// repeated tokens give the same bits on every run and on both backends, and
// no float atomics are needed.

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "cpu/convert.h"
#include "cpu/strided.h"
#include "ddp/core/dispatch.h"
#include "ddp/core/error.h"
#include "kernel_list.h"

namespace ddp::cpu_kernels {

namespace {

template <class I>
std::vector<int64_t> checked_indices(const Tensor& index, int64_t num, const char* op) {
  const int64_t n = index.numel();
  const I* ip = ptr<const I>(index);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = int64_t(ip[i]);
    DDP_CHECK_T(IndexError, k >= 0 && k < num,
                "{}: index {} at position {} is out of range [0, {})", op, k, i, num);
    v[size_t(i)] = k;
  }
  return v;
}

std::vector<int64_t> indices_of(const Tensor& index, int64_t num, const char* op) {
  std::vector<int64_t> v;
  dispatch_index(index.dtype(), op, [&]<class I>() { v = checked_indices<I>(index, num, op); });
  return v;
}

template <class T>
void forward_kernel(const Tensor& weight, const std::vector<int64_t>& idx, const Tensor& out) {
  const int64_t dim = weight.shape()[1];
  const T* w = ptr<const T>(weight);
  T* o = ptr<T>(out);
  for (size_t i = 0; i < idx.size(); ++i)
    std::memcpy(o + int64_t(i) * dim, w + idx[i] * dim, size_t(dim) * sizeof(T));
}

template <class T>
void backward_kernel(const Tensor& dy, const std::vector<int64_t>& idx, const Tensor& dweight) {
  using C = compute_t<T>;
  const int64_t dim = dweight.shape()[1], num = dweight.shape()[0];
  const T* g = ptr<const T>(dy);
  T* dw = ptr<T>(dweight);
  for (int64_t k = 0; k < num * dim; ++k) dw[k] = store<T>(C(0));
  std::vector<int64_t> order(idx.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return idx[size_t(a)] < idx[size_t(b)]; });
  std::vector<C> acc(static_cast<size_t>(dim));
  for (size_t s = 0; s < order.size();) {
    const int64_t row = idx[size_t(order[s])];
    std::fill(acc.begin(), acc.end(), C(0));
    for (; s < order.size() && idx[size_t(order[s])] == row; ++s) {
      const T* gr = g + order[s] * dim;
      for (int64_t j = 0; j < dim; ++j) acc[size_t(j)] += load(gr[j]);
    }
    T* dr = dw + row * dim;
    for (int64_t j = 0; j < dim; ++j) dr[j] = store<T>(acc[size_t(j)]);
  }
}

}  // namespace

DDP_REGISTER_KERNEL(embedding_forward, CPU,
                    [](const Tensor& weight, const Tensor& index, const Tensor& out) {
                      const std::vector<int64_t> idx =
                          indices_of(index, weight.shape()[0], "embedding");
                      dispatch_floating(weight.dtype(), "embedding",
                                        [&]<class T>() { forward_kernel<T>(weight, idx, out); });
                    })
DDP_REGISTER_KERNEL(embedding_backward, CPU,
                    [](const Tensor& dy, const Tensor& index, const Tensor& dweight) {
                      const std::vector<int64_t> idx =
                          indices_of(index, dweight.shape()[0], "embedding (backward)");
                      dispatch_floating(dweight.dtype(), "embedding_backward",
                                        [&]<class T>() { backward_kernel<T>(dy, idx, dweight); });
                    })

}  // namespace ddp::cpu_kernels
