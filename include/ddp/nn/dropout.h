#pragma once
// nn::Dropout, like torch.nn.Dropout: zeroes elements with probability p and
// scales the rest by 1/(1-p) in training mode; the identity in eval mode.
// The mask is drawn from the default Philox generator (manual_seed(s)
// reproduces it); see ddp/nn/functional/dropout.h.

#include "ddp/nn/module.h"

namespace ddp::nn {

class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);  // ValueError unless 0 <= p <= 1
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace ddp::nn
