#include "ddp/optim/sgd.h"

#include "ddp/tensor/ops.h"
#include "optim/foreach.h"
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

void SGD::update_group(const ParamGroup& group, const Tensors& params, const Tensors& grads,
                       const std::vector<TensorDict*>& states) {
  const SGDOptions& o = options_;
  Tensors bufs;
  std::vector<uint8_t> fresh;
  Tensor found_inf = step_found_inf();
  if (o.momentum != 0 && found_inf.defined()) {
    // A new momentum buffer starts as the step's gradient, so it cannot be
    // made by a step that may be skipped on the device (it would stay
    // unwritten, yet no longer be new). Only then, once per buffer, the
    // flag is read on the host (Note [GradScaler without host syncs]).
    bool any_fresh = false;
    for (TensorDict* st : states) any_fresh = any_fresh || st->find("momentum_buffer") == nullptr;
    if (any_fresh) {
      if (found_inf.item<float>() != 0.0f) return;  // skipped: nothing to create
      found_inf = Tensor();
    }
  }
  if (o.momentum != 0) {
    for (size_t k = 0; k < params.size(); ++k) {
      // A new buffer is filled by the step itself (it starts as the
      // gradient, as in torch), so it needs no zeros first.
      Tensor* buf = states[k]->find("momentum_buffer");
      fresh.push_back(buf == nullptr);
      if (!buf) buf = &states[k]->insert("momentum_buffer", empty_like(params[k]));
      bufs.push_back(*buf);
    }
  }
  try {
    multi_tensor::sgd_step(params, grads, bufs, fresh,
                           {.lr = *group.lr,
                            .weight_decay = *group.weight_decay,
                            .momentum = o.momentum,
                            .dampening = o.dampening,
                            .nesterov = o.nesterov,
                            .maximize = o.maximize},
                           found_inf);
  } catch (...) {
    // Buffers created for this step were never written: drop them.
    for (size_t k = 0; k < fresh.size(); ++k)
      if (fresh[k]) states[k]->erase("momentum_buffer");
    throw;
  }
}

TensorDict SGD::options_state() const {
  return {{"momentum", f64_scalar(options_.momentum)},
          {"dampening", f64_scalar(options_.dampening)},
          {"nesterov", f64_scalar(options_.nesterov)},
          {"maximize", f64_scalar(options_.maximize)}};
}

void SGD::load_options(const TensorDict& t) {
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
