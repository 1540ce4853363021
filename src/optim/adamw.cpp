#include "ddp/optim/adamw.h"

#include <cmath>

#include "ddp/tensor/ops.h"
#include "optim/foreach.h"
#include "optim_util.h"

namespace ddp::optim {

AdamWOptions AdamW::checked(AdamWOptions o) {
  // beta = 1 would divide by zero in the bias correction (1 - beta^t).
  check_range("AdamW", "betas[0]", o.betas[0], 0.0, std::nextafter(1.0, 0.0));
  check_range("AdamW", "betas[1]", o.betas[1], 0.0, std::nextafter(1.0, 0.0));
  check_range("AdamW", "eps", o.eps, 0.0, HUGE_VAL);
  check_range("AdamW", "weight_decay", o.weight_decay, 0.0, HUGE_VAL);
  return o;
}

AdamW::AdamW(const Tensors& params, double lr, AdamWOptions options)
    : AdamW(single_group(params), lr, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, double lr, AdamWOptions options)
    : Optimizer("AdamW", std::move(groups), lr, checked(options).weight_decay), options_(options) {}

void AdamW::update_group(const ParamGroup& group, const Tensors& params, const Tensors& grads,
                         const std::vector<TensorDict*>& states) {
  const AdamWOptions& o = options_;
  const double lr = *group.lr, beta1 = o.betas[0], beta2 = o.betas[1];
  Tensors exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
  std::vector<kernels::AdamWTensorScalars> per_tensor;
  // Device step counts (see the header): with a device flag, or once any
  // count of this group lives on a device.
  const Tensor& found_inf = step_found_inf();
  bool device_counts = found_inf.defined();
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor* step = states[k]->find("step");
    device_counts = device_counts || (step && step->device() != Device::cpu());
  }
  for (size_t k = 0; k < params.size(); ++k) {
    TensorDict& state = *states[k];
    if (state.empty()) {
      const Device where = device_counts ? params[k].device() : Device::cpu();
      state.insert("step", Tensor::zeros({}, TensorOptions(DType::f64).device(where)));
      state.insert("exp_avg", zeros_like(params[k]));
      state.insert("exp_avg_sq", zeros_like(params[k]));
      if (o.amsgrad) state.insert("max_exp_avg_sq", zeros_like(params[k]));
    }
    Tensor& step_t = state.at("step");
    if (device_counts) {
      // Counted by the kernel, which skips the count with the step.
      if (step_t.device() != params[k].device()) step_t = step_t.to(params[k].device());
      steps.push_back(step_t);
    } else {
      // Each parameter counts its own steps (one without a gradient is not
      // stepped), so the bias corrections are per tensor. The count lives on
      // the host as a tensor, to be part of the state dict, and is read back
      // here as torch does when not capturable.
      const double step = step_t.item<double>() + 1;
      step_t.fill_(step);
      per_tensor.push_back(kernels::adamw_bias_corrections(lr, beta1, beta2, step));
    }
    exp_avgs.push_back(state.at("exp_avg"));
    exp_avg_sqs.push_back(state.at("exp_avg_sq"));
    if (o.amsgrad) max_exp_avg_sqs.push_back(state.at("max_exp_avg_sq"));
  }
  multi_tensor::adamw_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, per_tensor,
                           {.lr = lr,
                            .weight_decay = *group.weight_decay,
                            .beta1 = beta1,
                            .beta2 = beta2,
                            .eps = o.eps,
                            .amsgrad = o.amsgrad,
                            .maximize = o.maximize},
                           steps, found_inf);
}

TensorDict AdamW::options_state() const {
  return {{"betas",
           Tensor::from_vector(std::vector<double>{options_.betas[0], options_.betas[1]}, {2})},
          {"eps", f64_scalar(options_.eps)},
          {"amsgrad", f64_scalar(options_.amsgrad)},
          {"maximize", f64_scalar(options_.maximize)}};
}

void AdamW::load_options(const TensorDict& t) {
  OptionReader r("AdamW.load_state_dict", t);
  AdamWOptions o = options_;
  std::vector<double> betas = r.values("betas", 2);
  o.betas = {betas[0], betas[1]};
  o.eps = r.number("eps");
  o.amsgrad = r.flag("amsgrad");
  o.maximize = r.flag("maximize");
  r.finish();
  options_ = checked(o);
}

std::vector<std::string> AdamW::state_names() const {
  if (options_.amsgrad) return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"step", "exp_avg", "exp_avg_sq"};
}

}  // namespace ddp::optim
