// Fused cross-entropy on the CPU: log-softmax and NLL (with label smoothing
// and ignore_index) in one pass over each row forward, and the closed-form
// gradient in one pass backward. Contract in kernels/kernel_list.h; the
// formulas in Note [Fused cross entropy] (src/nn/functional/loss.cpp).

#include <cmath>

#include "cpu/convert.h"
#include "cpu/strided.h"
#include "ddp/core/dispatch.h"
#include "ddp/core/error.h"
#include "kernel_list.h"

namespace ddp::cpu_kernels {

namespace {

template <class T>
void forward_kernel(const Tensor& logits, const Tensor& target, int64_t ignore_index, double eps,
                    const Tensor& loss, const Tensor& lse) {
  using C = compute_t<T>;
  const int64_t n = logits.shape()[0], classes = logits.shape()[1];
  const T* x = ptr<const T>(logits);
  const int64_t* t = ptr<const int64_t>(target);
  // Every target first, so a bad one raises before anything is written.
  for (int64_t i = 0; i < n; ++i)
    DDP_CHECK_T(IndexError, t[i] == ignore_index || (t[i] >= 0 && t[i] < classes),
                "cross_entropy: target {} at position {} is out of range [0, {}) and is not "
                "ignore_index ({})",
                t[i], i, classes, ignore_index);
  C* lp = ptr<C>(loss);
  C* sp = ptr<C>(lse);
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * classes;
    C m = load(xr[0]);
    for (int64_t c = 1; c < classes; ++c) {
      const C v = load(xr[c]);
      m = (v != v || v > m) ? v : m;  // NaN propagates
    }
    C s = 0, sx = 0;
    for (int64_t c = 0; c < classes; ++c) {
      const C v = load(xr[c]);
      s += std::exp(v - m);
      sx += v;
    }
    const C row_lse = m + std::log(s);
    sp[i] = row_lse;
    if (t[i] == ignore_index) {
      lp[i] = C(0);
      continue;
    }
    const C nll = row_lse - load(xr[t[i]]);
    C l = C(1 - eps) * nll;
    if (eps > 0) l += C(eps) * (row_lse - sx / C(classes));
    lp[i] = l;
  }
}

template <class T>
void backward_kernel(const Tensor& logits, const Tensor& target, const Tensor& lse,
                     const Tensor& scale, int64_t ignore_index, double eps, const Tensor& dx) {
  using C = compute_t<T>;
  const int64_t n = logits.shape()[0], classes = logits.shape()[1];
  const T* x = ptr<const T>(logits);
  const int64_t* t = ptr<const int64_t>(target);
  const C* sp = ptr<const C>(lse);
  const C* gp = ptr<const C>(scale);
  T* d = ptr<T>(dx);
  const C smooth = C(eps / double(classes)), hit = C(1 - eps);
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * classes;
    T* dr = d + i * classes;
    if (t[i] == ignore_index) {
      for (int64_t c = 0; c < classes; ++c) dr[c] = store<T>(C(0));
      continue;
    }
    const C g = gp[i], row_lse = sp[i];
    for (int64_t c = 0; c < classes; ++c) {
      C p = std::exp(load(xr[c]) - row_lse) - smooth;
      if (c == t[i]) p -= hit;
      dr[c] = store<T>(p * g);
    }
  }
}

}  // namespace

DDP_REGISTER_KERNEL(cross_entropy_forward, CPU,
                    [](const Tensor& logits, const Tensor& target, int64_t ignore_index,
                       double label_smoothing, const Tensor& loss, const Tensor& lse) {
                      dispatch_floating(logits.dtype(), "cross_entropy", [&]<class T>() {
                        forward_kernel<T>(logits, target, ignore_index, label_smoothing, loss, lse);
                      });
                    })
DDP_REGISTER_KERNEL(cross_entropy_backward, CPU,
                    [](const Tensor& logits, const Tensor& target, const Tensor& lse,
                       const Tensor& scale, int64_t ignore_index, double label_smoothing,
                       const Tensor& dx) {
                      dispatch_floating(logits.dtype(), "cross_entropy_backward", [&]<class T>() {
                        backward_kernel<T>(logits, target, lse, scale, ignore_index,
                                           label_smoothing, dx);
                      });
                    })

}  // namespace ddp::cpu_kernels
