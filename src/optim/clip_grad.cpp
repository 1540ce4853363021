#include "ddp/optim/clip_grad.h"

#include "ddp/autograd/grad_mode.h"
#include "ddp/tensor/ops.h"
#include "optim/foreach.h"

namespace ddp::optim {

namespace {

// The defined gradients of params; one_device: all must be on one device.
Tensors defined_grads(const Tensors& params, const char* who, bool one_device) {
  Tensors grads;
  for (size_t k = 0; k < params.size(); ++k) {
    DDP_CHECK(params[k].defined(), "{}: parameter {} is undefined", who, k);
    Tensor g = params[k].grad();
    if (!g.defined()) continue;
    DDP_CHECK_T(DeviceError, !one_device || grads.empty() || g.device() == grads[0].device(),
                "{}: the gradient of parameter {} is {}, but earlier gradients are on {}; all "
                "gradients must be on one device",
                who, k, g.describe(), grads[0].device().str());
    grads.push_back(g);
  }
  return grads;
}

}  // namespace

double clip_grad_norm_(const Tensors& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  const char* who = "clip_grad_norm_";
  DDP_CHECK(max_norm >= 0, "{}: max_norm must be >= 0, got {}", who, max_norm);
  DDP_CHECK(norm_type > 0, "{}: norm_type must be > 0 (or INFINITY), got {}", who, norm_type);
  Tensors grads = defined_grads(params, who, /*one_device=*/true);
  if (grads.empty()) return 0.0;
  NoGradGuard no_grad;
  const double sum = multi_tensor::pow_sum(grads, norm_type);
  double total = sum;
  if (std::isfinite(norm_type) && norm_type != 1)
    total = norm_type == 2 ? std::sqrt(sum) : std::pow(sum, 1.0 / norm_type);
  if (error_if_nonfinite && !std::isfinite(total))
    DDP_THROW(Error,
              "{}: the total norm of order {} of the gradients is {}, so they cannot be "
              "clipped; pass error_if_nonfinite = false to scale them by the non-finite norm "
              "anyway",
              who, norm_type, total);
  const double coef = max_norm / (total + 1e-6);
  // NaN stays NaN (torch.clamp propagates it); a coefficient of 1 changes
  // nothing, so that pass is skipped.
  const double clamped = coef < 1.0 || std::isnan(coef) ? coef : 1.0;
  if (clamped != 1.0) multi_tensor::mul_(grads, clamped, /*check_finite=*/false);
  return total;
}

void clip_grad_value_(const Tensors& params, double clip_value) {
  const char* who = "clip_grad_value_";
  DDP_CHECK(clip_value >= 0, "{}: clip_value must be >= 0, got {}", who, clip_value);
  NoGradGuard no_grad;
  for (Tensor& g : defined_grads(params, who, /*one_device=*/false))
    g.copy_(minimum(maximum(g, -clip_value), clip_value));
}

}  // namespace ddp::optim
