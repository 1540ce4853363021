#include "ddp/optim/sgd.h"

#include "ddp/tensor/ops.h"
#include "optim_util.h"

namespace ddp::optim {

SGDOptions SGD::checked(SGDOptions o) {
  check_range("SGD", "momentum", o.momentum, 0.0, HUGE_VAL);
  check_range("SGD", "dampening", o.dampening, -HUGE_VAL, HUGE_VAL);
  check_range("SGD", "weight_decay", o.weight_decay, 0.0, HUGE_VAL);
  DDP_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
            "SGD: nesterov momentum requires momentum > 0 and dampening = 0, got momentum {} "
            "and dampening {}",
            o.momentum, o.dampening);
  return o;
}

SGD::SGD(const Tensors& params, double lr, SGDOptions options)
    : SGD(single_group(params), lr, options) {}

SGD::SGD(std::vector<ParamGroup> groups, double lr, SGDOptions options)
    : Optimizer("SGD", std::move(groups), lr, checked(options).weight_decay), options_(options) {}

void SGD::update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
                 nn::TensorDict& state) {
  const SGDOptions& o = options_;
  // d is a fresh tensor from here on, never the .grad itself, which the
  // in-place updates below must not touch.
  Tensor d = o.maximize ? neg(grad) : grad;
  if (*group.weight_decay != 0) d = add(d, mul(param, *group.weight_decay));
  if (o.momentum != 0) {
    Tensor* buf = state.find("momentum_buffer");
    if (!buf) {
      buf = &state.insert("momentum_buffer", d.clone());
    } else {
      buf->mul_(o.momentum).add_(d, 1.0 - o.dampening);
    }
    d = o.nesterov ? add(d, mul(*buf, o.momentum)) : *buf;
  }
  Tensor p = param;  // a handle to the same data
  p.add_(d, -*group.lr);
}

nn::TensorDict SGD::options_state() const {
  return {{"momentum", f64_scalar(options_.momentum)},
          {"dampening", f64_scalar(options_.dampening)},
          {"nesterov", f64_scalar(options_.nesterov)},
          {"maximize", f64_scalar(options_.maximize)}};
}

void SGD::load_options(const nn::TensorDict& t) {
  OptionReader r("SGD.load_state_dict", t);
  SGDOptions o = options_;
  o.momentum = r.number("momentum");
  o.dampening = r.number("dampening");
  o.nesterov = r.flag("nesterov");
  o.maximize = r.flag("maximize");
  r.finish();
  options_ = checked(o);
}

std::vector<std::string> SGD::state_names() const {
  if (options_.momentum == 0) return {};
  return {"momentum_buffer"};
}

}  // namespace ddp::optim
