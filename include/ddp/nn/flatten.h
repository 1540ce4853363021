#pragma once
// nn::Flatten, like torch.nn.Flatten: merges dims start_dim..end_dim into
// one (a view when the strides allow, else a copy; differentiable).

#include <cstdint>

#include "ddp/nn/module.h"

namespace ddp::nn {

class Flatten : public UnaryModule {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  // ShapeError naming this module when x has too few dims for the range,
  // or the range is empty (start after end).
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  int64_t start_, end_;
};

}  // namespace ddp::nn
