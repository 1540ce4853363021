#pragma once
// Scalar functors for the elementwise ops of op_list.h, shared by the CPU and
// CUDA kernels. They operate on the compute type C (see Note [Compute type]):
// float, double or int64_t. Unary functors carry forward(x) and the
// derivative backward(x, y, dy) = dy * f'(x), where y = forward(x).

#include <cmath>
#include <cstdint>

#include "ddp/core/macros.h"

namespace ddp::fn {

// Math in the precision of C: float overloads call the f-suffixed C
// functions (::exp would widen a float to double on the host and differ from
// CUDA's expf in the last bits).
DDP_INLINE_HD float exp_(float x) { return ::expf(x); }
DDP_INLINE_HD double exp_(double x) { return ::exp(x); }
DDP_INLINE_HD float log_(float x) { return ::logf(x); }
DDP_INLINE_HD double log_(double x) { return ::log(x); }
DDP_INLINE_HD float tanh_(float x) { return ::tanhf(x); }
DDP_INLINE_HD double tanh_(double x) { return ::tanh(x); }
DDP_INLINE_HD float erf_(float x) { return ::erff(x); }
DDP_INLINE_HD double erf_(double x) { return ::erf(x); }
DDP_INLINE_HD float sqrt_(float x) { return ::sqrtf(x); }
DDP_INLINE_HD double sqrt_(double x) { return ::sqrt(x); }

template <class C> DDP_INLINE_HD C max_(C a, C b) { return a > b ? a : b; }
template <class C> DDP_INLINE_HD C min_(C a, C b) { return a < b ? a : b; }

struct ReluFn {
  template <class C> DDP_INLINE_HD static C forward(C x) { return x > C(0) ? x : C(0); }
  template <class C> DDP_INLINE_HD static C backward(C x, C, C dy) { return x > C(0) ? dy : C(0); }
};
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct GeluTanhFn {
  template <class C> DDP_INLINE_HD static C forward(C x) {
    const C k = C(0.7978845608028654), a = C(0.044715);
    return C(0.5) * x * (C(1) + tanh_(k * (x + a * x * x * x)));
  }
  template <class C> DDP_INLINE_HD static C backward(C x, C, C dy) {
    const C k = C(0.7978845608028654), a = C(0.044715);
    C inner = k * (x + a * x * x * x);
    C t = tanh_(inner);
    C dinner = k * (C(1) + C(3) * a * x * x);
    return dy * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * dinner);
  }
};
// GELU, exact: x·Φ(x) = ½·x·(1 + erf(x/√2)); dy/dx = Φ(x) + x·φ(x), with
// φ(x) = exp(−x²/2)/√(2π).
struct GeluErfFn {
  template <class C> DDP_INLINE_HD static C forward(C x) {
    return C(0.5) * x * (C(1) + erf_(x * C(0.70710678118654752440)));
  }
  template <class C> DDP_INLINE_HD static C backward(C x, C, C dy) {
    const C cdf = C(0.5) * (C(1) + erf_(x * C(0.70710678118654752440)));
    const C pdf = exp_(C(-0.5) * x * x) * C(0.39894228040143267794);
    return dy * (cdf + x * pdf);
  }
};
// SiLU (swish): x·σ(x); dy/dx = σ(x)·(1 + x·(1 − σ(x))).
struct SiluFn {
  template <class C> DDP_INLINE_HD static C forward(C x) { return x / (C(1) + exp_(-x)); }
  template <class C> DDP_INLINE_HD static C backward(C x, C, C dy) {
    const C s = C(1) / (C(1) + exp_(-x));
    return dy * s * (C(1) + x * (C(1) - s));
  }
};
struct ExpFn {
  template <class C> DDP_INLINE_HD static C forward(C x) { return exp_(x); }
  template <class C> DDP_INLINE_HD static C backward(C, C y, C dy) { return dy * y; }
};
struct LogFn {
  template <class C> DDP_INLINE_HD static C forward(C x) { return log_(x); }
  template <class C> DDP_INLINE_HD static C backward(C x, C, C dy) { return dy / x; }
};
struct TanhFn {
  template <class C> DDP_INLINE_HD static C forward(C x) { return tanh_(x); }
  template <class C> DDP_INLINE_HD static C backward(C, C y, C dy) { return dy * (C(1) - y * y); }
};
struct SigmoidFn {
  template <class C> DDP_INLINE_HD static C forward(C x) { return C(1) / (C(1) + exp_(-x)); }
  template <class C> DDP_INLINE_HD static C backward(C, C y, C dy) { return dy * y * (C(1) - y); }
};
struct SqrtFn {
  template <class C> DDP_INLINE_HD static C forward(C x) { return sqrt_(x); }
  template <class C> DDP_INLINE_HD static C backward(C, C y, C dy) { return dy / (C(2) * y); }
};
struct RsqrtFn {
  template <class C> DDP_INLINE_HD static C forward(C x) { return C(1) / sqrt_(x); }
  template <class C> DDP_INLINE_HD static C backward(C, C y, C dy) { return C(-0.5) * dy * y * y * y; }
};
struct NegFn {
  template <class C> DDP_INLINE_HD static C forward(C x) { return -x; }
  template <class C> DDP_INLINE_HD static C backward(C, C, C dy) { return -dy; }
};
struct AbsFn {
  template <class C> DDP_INLINE_HD static C forward(C x) { return x < C(0) ? -x : x; }
  template <class C> DDP_INLINE_HD static C backward(C x, C, C dy) {
    return x > C(0) ? dy : (x < C(0) ? -dy : C(0));
  }
};

struct AddFn { template <class C> DDP_INLINE_HD static C apply(C a, C b) { return a + b; } };
struct SubFn { template <class C> DDP_INLINE_HD static C apply(C a, C b) { return a - b; } };
struct MulFn { template <class C> DDP_INLINE_HD static C apply(C a, C b) { return a * b; } };
// Integer division by zero is defined here (returns 0) instead of trapping.
struct DivFn {
  template <class C> DDP_INLINE_HD static C apply(C a, C b) {
    if constexpr (C(1) / C(2) == C(0)) return b == C(0) ? C(0) : a / b;
    else return a / b;
  }
};
// maximum/minimum propagate NaN like torch.maximum.
struct MaxFn { template <class C> DDP_INLINE_HD static C apply(C a, C b) { return (a != a || a > b) ? a : b; } };
struct MinFn { template <class C> DDP_INLINE_HD static C apply(C a, C b) { return (a != a || a < b) ? a : b; } };

struct EqFn { template <class C> DDP_INLINE_HD static bool apply(C a, C b) { return a == b; } };
struct NeFn { template <class C> DDP_INLINE_HD static bool apply(C a, C b) { return a != b; } };
struct LtFn { template <class C> DDP_INLINE_HD static bool apply(C a, C b) { return a < b; } };
struct LeFn { template <class C> DDP_INLINE_HD static bool apply(C a, C b) { return a <= b; } };
struct GtFn { template <class C> DDP_INLINE_HD static bool apply(C a, C b) { return a > b; } };
struct GeFn { template <class C> DDP_INLINE_HD static bool apply(C a, C b) { return a >= b; } };

}  // namespace ddp::fn
