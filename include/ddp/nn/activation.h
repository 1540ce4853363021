#pragma once
// Activation modules, like torch.nn.GELU and torch.nn.ReLU; the math is in
// ddp/nn/functional/activation.h.

#include <string>

#include "ddp/nn/module.h"

namespace ddp::nn {

class GELU : public UnaryModule {
 public:
  // approximate: "none" (exact, erf) or "tanh"; ValueError otherwise.
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const std::string& approximate() const { return approximate_; }

 private:
  std::string approximate_;
};

// x·σ(x), like torch.nn.SiLU.
class SiLU : public UnaryModule {
 public:
  SiLU() : UnaryModule("SiLU") {}
  Tensor forward(const Tensor& x) override;
};

class ReLU : public UnaryModule {
 public:
  ReLU() : UnaryModule("ReLU") {}
  Tensor forward(const Tensor& x) override;
};

}  // namespace ddp::nn
