#pragma once
// The per-element arithmetic of the multi-tensor ("foreach") optimizer
// kernels, shared by kernels/cpu/foreach.cpp and kernels/cuda/foreach.cu so
// that both backends run one formula (see Note [Foreach numerics] in
// src/optim/foreach.h). C is the compute type: float for f16, bf16 and f32
// storage, double for f64 (Note [Compute type]); values are loaded into C,
// updated and stored back once.
//
// The order of operations is torch.optim's single-tensor ("for-loop") one,
// operation by operation, so that on the CPU, where nothing is contracted
// into fused multiply-adds, an f32 step rounds like torch's does.

#include <cmath>
#include <cstdint>

#include "ddp/core/macros.h"

namespace ddp::kernels {

// Options of one SGD step over a parameter group (see ddp/optim/sgd.h).
struct SgdScalars {
  double lr = 0, weight_decay = 0, momentum = 0, dampening = 0;
  bool nesterov = false, maximize = false;
};

// Options of one AdamW step; the per-parameter bias corrections (which depend
// on each parameter's own step count) travel separately as AdamWTensorScalars.
struct AdamWScalars {
  double lr = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0;
  bool amsgrad = false, maximize = false;
};
struct AdamWTensorScalars {
  double step_size = 0;              // lr / (1 - beta1^t)
  double bias_correction2_sqrt = 1;  // sqrt(1 - beta2^t)
};

// x is neither inf nor NaN (no <cmath> classification, which the device
// side of a host-device function cannot call portably).
template <class C>
DDP_INLINE_HD bool is_finite_value(C x) {
  return x - x == C(0);
}

// max(a, b) that returns NaN when either is NaN, like torch.maximum.
template <class C>
DDP_INLINE_HD C max_propagating_nan(C a, C b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

// The correctly rounded square root in C itself (sqrtf for float, so that
// host and device agree and nothing goes through double).
DDP_INLINE_HD float root(float x) { return ::sqrtf(x); }
DDP_INLINE_HD double root(double x) { return ::sqrt(x); }

// One SGD update of parameter value p with gradient g. buf is the momentum
// buffer's value (unused when momentum == 0); fresh: the buffer does not
// exist yet and starts as the (decayed) gradient, as in torch.
template <class C>
DDP_INLINE_HD void sgd_element(C& p, C g, C& buf, bool fresh, const SgdScalars& s) {
  C d = s.maximize ? -g : g;
  if (s.weight_decay != 0) d = d + p * C(s.weight_decay);
  if (s.momentum != 0) {
    buf = fresh ? d : buf * C(s.momentum) + d * C(1.0 - s.dampening);
    d = s.nesterov ? d + buf * C(s.momentum) : buf;
  }
  p = p + d * C(-s.lr);
}

// One AdamW update: p, m (exp_avg), v (exp_avg_sq) and, with amsgrad, vmax
// (max_exp_avg_sq) in place.
template <class C>
DDP_INLINE_HD void adamw_element(C& p, C g, C& m, C& v, C& vmax, const AdamWScalars& s,
                                 const AdamWTensorScalars& t) {
  if (s.maximize) g = -g;
  p = p * C(1.0 - s.lr * s.weight_decay);
  m = m * C(s.beta1) + g * C(1.0 - s.beta1);
  v = v * C(s.beta2) + (g * g) * C(1.0 - s.beta2);
  C second = v;
  if (s.amsgrad) {
    vmax = max_propagating_nan(vmax, v);
    second = vmax;
  }
  const C denom = root(second) / C(t.bias_correction2_sqrt) + C(s.eps);
  p = p + (m / denom) * C(-t.step_size);
}

// AdamW's bias corrections at step t (t >= 1), computed where the step
// count lives: on the host for host counts, in the kernel for device counts
// (Note [GradScaler without host syncs] in src/amp/grad_scaler.cpp).
DDP_INLINE_HD AdamWTensorScalars adamw_bias_corrections(double lr, double beta1, double beta2,
                                                        double t) {
  return {lr / (1.0 - ::pow(beta1, t)), ::sqrt(1.0 - ::pow(beta2, t))};
}

// GradScaler's options for one update of its scale.
struct ScaleUpdate {
  double growth_factor = 2, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// One update of GradScaler's f32 scale and growth tracker, torch's
// _amp_update_scale_: on inf/NaN the scale backs off and the tracker
// resets; otherwise the tracker counts the good step and, when it reaches
// growth_interval, the scale grows (only if the result is finite in f32)
// and the tracker resets. The same function on the host and the device.
DDP_INLINE_HD void update_scale(float& scale, int64_t& tracker, bool found_inf,
                                const ScaleUpdate& u) {
  if (found_inf) {
    scale = scale * float(u.backoff_factor);
    tracker = 0;
  } else if (tracker + 1 == u.growth_interval) {
    const float grown = scale * float(u.growth_factor);
    if (is_finite_value(grown)) scale = grown;
    tracker = 0;
  } else {
    ++tracker;
  }
}

// The contribution of x to a p-norm: |x|^p, with the common orders spelled
// out (|x|, x², exact and fast); accumulated in double.
DDP_INLINE_HD double norm_term(double x, double p) {
  const double a = x < 0 ? -x : x;
  if (p == 1) return a;
  if (p == 2) return x * x;
  return ::pow(a, p);
}

}  // namespace ddp::kernels
