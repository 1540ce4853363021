#pragma once
// Stochastic gradient descent with momentum, exactly as torch.optim.SGD:
// with g the gradient (negated when maximize), for each parameter p
//   g = g + weight_decay * p                      (weight_decay != 0)
//   b = g on the first step, else momentum * b + (1 - dampening) * g
//   g = nesterov ? g + momentum * b : b           (momentum != 0)
//   p = p - lr * g
// State (momentum != 0 only): "momentum_buffer", like the parameter.

#include "ddp/optim/optimizer.h"

namespace ddp::optim {

struct SGDOptions {
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // the default of groups that set none
  bool nesterov = false;      // needs momentum > 0 and dampening == 0
  bool maximize = false;
};

class SGD : public Optimizer {
 public:
  SGD(const Tensors& params, double lr, SGDOptions options = {});
  SGD(std::vector<ParamGroup> groups, double lr, SGDOptions options = {});

  const SGDOptions& options() const { return options_; }
  bool skips_on_device() const override { return true; }

 protected:
  void update_group(const ParamGroup& group, const Tensors& params, const Tensors& grads,
                    const std::vector<TensorDict*>& states) override;
  TensorDict options_state() const override;
  void load_options(const TensorDict& options) override;
  std::vector<std::string> state_names() const override;

 private:
  static SGDOptions checked(SGDOptions o);
  SGDOptions options_;
};

}  // namespace ddp::optim
