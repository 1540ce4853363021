// CPU multi-tensor kernels (contracts in kernels/kernel_list.h; Note
// [Foreach numerics] in src/optim/foreach.h). Serial loops: the reductions
// then add in one fixed order and are deterministic. An empty optional list
// (momentum buffers without momentum, max_exp_avg_sqs without amsgrad)
// arrives as an empty Tensors.

#include "kernel_list.h"

#include <cmath>

#include "common/scalar_cast.h"
#include "ddp/core/dispatch.h"

namespace ddp::cpu_kernels {

using kernels::load;
using kernels::store;

namespace {

template <class T>
T* data_of(const Tensors& list, size_t k) {
  return list.empty() ? nullptr : static_cast<T*>(list[k].data_ptr());
}

// GradScaler's flag (Note [GradScaler without host syncs]): set = skip.
bool skip_step(const Tensor& found_inf) {
  return found_inf.defined() && *static_cast<const float*>(found_inf.data_ptr()) != 0.0f;
}

}  // namespace

static void foreach_sgd(const Tensors& params, const Tensors& grads, const Tensors& bufs,
                 const std::vector<uint8_t>& fresh, const kernels::SgdScalars& s,
                 const Tensor& found_inf) {
  if (params.empty() || skip_step(found_inf)) return;
  dispatch_floating(params[0].dtype(), "foreach_sgd", [&]<class T>() {
    using C = compute_t<T>;
    for (size_t k = 0; k < params.size(); ++k) {
      T* p = data_of<T>(params, k);
      const T* g = data_of<T>(grads, k);
      T* b = data_of<T>(bufs, k);
      const bool is_fresh = !fresh.empty() && fresh[k];
      const int64_t n = params[k].numel();
      for (int64_t i = 0; i < n; ++i) {
        C pv = load(p[i]);
        C bv = b && !is_fresh ? load(b[i]) : C(0);
        kernels::sgd_element(pv, load(g[i]), bv, is_fresh, s);
        p[i] = store<T>(pv);
        if (b) b[i] = store<T>(bv);
      }
    }
  });
}

static void foreach_adamw(const Tensors& params, const Tensors& grads, const Tensors& exp_avgs,
                   const Tensors& exp_avg_sqs, const Tensors& max_exp_avg_sqs,
                   const std::vector<kernels::AdamWTensorScalars>& per_tensor,
                   const Tensors& steps, const kernels::AdamWScalars& s,
                   const Tensor& found_inf) {
  if (params.empty() || skip_step(found_inf)) return;
  dispatch_floating(params[0].dtype(), "foreach_adamw", [&]<class T>() {
    using C = compute_t<T>;
    for (size_t k = 0; k < params.size(); ++k) {
      T* p = data_of<T>(params, k);
      const T* g = data_of<T>(grads, k);
      T* m = data_of<T>(exp_avgs, k);
      T* v = data_of<T>(exp_avg_sqs, k);
      T* vmax = data_of<T>(max_exp_avg_sqs, k);
      kernels::AdamWTensorScalars t{};
      if (steps.empty()) {
        t = per_tensor[k];
      } else {  // counts kept as tensors: count this step, then correct with it
        double& step = *static_cast<double*>(steps[k].data_ptr());
        step += 1;
        t = kernels::adamw_bias_corrections(s.lr, s.beta1, s.beta2, step);
      }
      const int64_t n = params[k].numel();
      for (int64_t i = 0; i < n; ++i) {
        C pv = load(p[i]), mv = load(m[i]), vv = load(v[i]);
        C vmaxv = vmax ? load(vmax[i]) : C(0);
        kernels::adamw_element(pv, load(g[i]), mv, vv, vmaxv, s, t);
        p[i] = store<T>(pv);
        m[i] = store<T>(mv);
        v[i] = store<T>(vv);
        if (vmax) vmax[i] = store<T>(vmaxv);
      }
    }
  });
}

static double foreach_norm(const Tensors& xs, double p) {
  const bool is_max = std::isinf(p);
  double acc = 0;
  for (const Tensor& x : xs) {
    dispatch_floating(x.dtype(), "foreach_norm", [&]<class T>() {
      const T* d = static_cast<const T*>(x.data_ptr());
      const int64_t n = x.numel();
      for (int64_t i = 0; i < n; ++i) {
        const double v = double(load(d[i]));
        acc = is_max ? kernels::max_propagating_nan(acc, std::abs(v))
                     : acc + kernels::norm_term(v, p);
      }
    });
  }
  return acc;
}

static bool foreach_mul_(const Tensors& xs, double factor) {
  bool found = false;
  for (const Tensor& x : xs) {
    dispatch_floating(x.dtype(), "foreach_mul_", [&]<class T>() {
      using C = compute_t<T>;
      const C f = C(factor);
      T* d = static_cast<T*>(x.data_ptr());
      const int64_t n = x.numel();
      for (int64_t i = 0; i < n; ++i) {
        const C v = load(d[i]);
        found = found || !kernels::is_finite_value(v);
        d[i] = store<T>(v * f);
      }
    });
  }
  return found;
}

// The unscale of foreach_mul with the factor read from the scale tensor and
// the flag written to a tensor, as the CUDA kernel (kernel_list.h).
static void unscale_with_flag(const Tensors& xs, const Tensor& scale,
                              const Tensor& found_inf) {
  const double inv = double(float(1.0 / double(*static_cast<const float*>(scale.data_ptr()))));
  if (foreach_mul_(xs, inv)) *static_cast<float*>(found_inf.data_ptr()) = 1.0f;
}

static void update_scale_in_place(const Tensor& scale, const Tensor& growth_tracker,
                                  const Tensor& found_inf, const kernels::ScaleUpdate& u) {
  kernels::update_scale(*static_cast<float*>(scale.data_ptr()),
                        *static_cast<int64_t*>(growth_tracker.data_ptr()),
                        *static_cast<const float*>(found_inf.data_ptr()) != 0.0f, u);
}

DDP_REGISTER_KERNEL(foreach_sgd_step, CPU, foreach_sgd)
DDP_REGISTER_KERNEL(foreach_unscale, CPU, unscale_with_flag)
DDP_REGISTER_KERNEL(amp_update_scale, CPU, update_scale_in_place)
DDP_REGISTER_KERNEL(foreach_adamw_step, CPU, foreach_adamw)
DDP_REGISTER_KERNEL(foreach_pow_sum, CPU, foreach_norm)
DDP_REGISTER_KERNEL(foreach_mul, CPU, [](const Tensors& xs, double factor, bool check_finite) {
  return foreach_mul_(xs, factor) && check_finite;
})

}  // namespace ddp::cpu_kernels
