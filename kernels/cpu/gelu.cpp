// The exact GELU on the CPU (the tanh form is the tensor op gelu()):
//   y = x · Φ(x) = ½·x·(1 + erf(x/√2)),   dy/dx = Φ(x) + x·φ(x),
// with φ(x) = exp(-x²/2)/√(2π). Computed in the compute type (f32 for
// f16/bf16/f32, f64 for f64) with the same formulas as kernels/cuda/gelu.cu.

#include <cmath>

#include "cpu/convert.h"
#include "cpu/nn_kernels.h"
#include "cpu/strided.h"
#include "ddp/core/dispatch.h"

namespace ddp::cpu {

void gelu_erf(const Tensor& xt, const Tensor& yt) {
  dispatch_floating(xt.dtype(), "gelu", [&]<class T>() {
    using C = compute_t<T>;
    const T* x = ptr<const T>(xt);
    T* y = ptr<T>(yt);
    const C inv_sqrt2 = C(0.70710678118654752440);
    for (int64_t i = 0, n = xt.numel(); i < n; ++i) {
      const C v = load(x[i]);
      y[i] = store<T>(C(0.5) * v * (C(1) + std::erf(v * inv_sqrt2)));
    }
  });
}

void gelu_erf_backward(const Tensor& xt, const Tensor& dyt, const Tensor& dxt) {
  dispatch_floating(xt.dtype(), "gelu_backward", [&]<class T>() {
    using C = compute_t<T>;
    const T* x = ptr<const T>(xt);
    const T* dy = ptr<const T>(dyt);
    T* dx = ptr<T>(dxt);
    const C inv_sqrt2 = C(0.70710678118654752440);
    const C inv_sqrt_2pi = C(0.39894228040143267794);
    for (int64_t i = 0, n = xt.numel(); i < n; ++i) {
      const C v = load(x[i]);
      const C cdf = C(0.5) * (C(1) + std::erf(v * inv_sqrt2));
      const C pdf = std::exp(C(-0.5) * v * v) * inv_sqrt_2pi;
      dx[i] = store<T>(load(dy[i]) * (cdf + v * pdf));
    }
  });
}

}  // namespace ddp::cpu
