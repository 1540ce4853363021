#pragma once
// Adam with decoupled weight decay, exactly as torch.optim.AdamW: with g the
// gradient (negated when maximize) and t the parameter's step count,
//   p   = p * (1 - lr * weight_decay)
//   m   = beta1 * m + (1 - beta1) * g
//   v   = beta2 * v + (1 - beta2) * g * g
//   v'  = amsgrad ? (vmax = max(vmax, v)) : v
//   p   = p - lr / (1 - beta1^t) * m / (sqrt(v') / sqrt(1 - beta2^t) + eps)
// State: "step" (0-dim f64), "exp_avg", "exp_avg_sq" and, with amsgrad,
// "max_exp_avg_sq" (like the parameter). "step" lives on the host, where the
// bias corrections are computed, until a step(found_inf) (GradScaler on a
// GPU) moves it to the parameter's device: a skipped step must not count,
// and only the device knows whether it was skipped, so from then on the
// count and the bias corrections stay on the device (as torch's fused
// AdamW keeps "step" on the device).

#include <array>

#include "ddp/optim/optimizer.h"

namespace ddp::optim {

struct AdamWOptions {
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // the default of groups that set none
  bool amsgrad = false;
  bool maximize = false;
};

class AdamW : public Optimizer {
 public:
  explicit AdamW(const Tensors& params, double lr = 1e-3, AdamWOptions options = {});
  explicit AdamW(std::vector<ParamGroup> groups, double lr = 1e-3, AdamWOptions options = {});

  const AdamWOptions& options() const { return options_; }
  bool skips_on_device() const override { return true; }

 protected:
  void update_group(const ParamGroup& group, const Tensors& params, const Tensors& grads,
                    const std::vector<TensorDict*>& states) override;
  TensorDict options_state() const override;
  void load_options(const TensorDict& options) override;
  std::vector<std::string> state_names() const override;

 private:
  static AdamWOptions checked(AdamWOptions o);
  AdamWOptions options_;
};

}  // namespace ddp::optim
