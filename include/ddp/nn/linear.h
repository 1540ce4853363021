#pragma once
// nn::Linear, like torch.nn.Linear: y = x·Wᵀ + b for x [..., in_features].

#include <cstdint>

#include "ddp/nn/module.h"

namespace ddp::nn {

class Linear : public UnaryModule {
 public:
  // weight [out, in] ~ kaiming_uniform(a = √5), i.e. U(-1/√in, 1/√in);
  // bias [out] ~ U(-1/√in, 1/√in), or none (bias = false). Drawn from the
  // default generator, as torch draws from its global one.
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  // ShapeError naming this module when x is not [..., in_features].
  Tensor forward(const Tensor& x) override;
  // gelu(forward(x), "tanh") as one fused op (functional::linear_gelu: on
  // CUDA one cuBLASLt GEMM with a bias + GELU epilogue); same checks.
  Tensor forward_gelu(const Tensor& x);
  std::string extra_repr() const override;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

  Tensor weight, bias;  // bias undefined without one

 private:
  void check_input(const Tensor& x) const;  // ShapeError naming this module
  int64_t in_, out_;
};

}  // namespace ddp::nn
