#include "ddp/optim/adamw.h"

#include <cmath>

#include "ddp/tensor/ops.h"
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

void AdamW::update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
                   nn::TensorDict& state) {
  const AdamWOptions& o = options_;
  const double lr = *group.lr, beta1 = o.betas[0], beta2 = o.betas[1];
  if (state.empty()) {
    state.insert("step", Tensor::scalar(0.0, DType::f64));
    state.insert("exp_avg", zeros_like(param));
    state.insert("exp_avg_sq", zeros_like(param));
    if (o.amsgrad) state.insert("max_exp_avg_sq", zeros_like(param));
  }
  Tensor g = o.maximize ? neg(grad) : grad;
  Tensor& step_t = state.at("step");
  // The count lives on the host as a tensor (so that it is part of the
  // state dict) and is read back here, as torch does when not capturable.
  const double step = step_t.item<double>() + 1;
  step_t.fill_(step);

  Tensor p = param;  // a handle to the same data
  p.mul_(1.0 - lr * *group.weight_decay);
  Tensor& m = state.at("exp_avg");
  Tensor& v = state.at("exp_avg_sq");
  m.mul_(beta1).add_(g, 1.0 - beta1);
  v.mul_(beta2).add_(mul(g, g), 1.0 - beta2);

  const double bias_correction1 = 1.0 - std::pow(beta1, step);
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, step));
  const double step_size = lr / bias_correction1;
  Tensor second = v;
  if (o.amsgrad) {
    Tensor& vmax = state.at("max_exp_avg_sq");
    vmax.copy_(maximum(vmax, v));
    second = vmax;
  }
  Tensor denom = add(div(sqrt(second), bias_correction2_sqrt), o.eps);
  p.add_(div(m, denom), -step_size);
}

nn::TensorDict AdamW::options_state() const {
  return {{"betas",
           Tensor::from_vector(std::vector<double>{options_.betas[0], options_.betas[1]}, {2})},
          {"eps", f64_scalar(options_.eps)},
          {"amsgrad", f64_scalar(options_.amsgrad)},
          {"maximize", f64_scalar(options_.maximize)}};
}

void AdamW::load_options(const nn::TensorDict& t) {
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
