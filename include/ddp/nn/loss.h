#pragma once
// Loss modules, like torch.nn.CrossEntropyLoss and torch.nn.MSELoss; the
// math is in ddp/nn/functional/loss.h. They take two tensors, so they are
// plain Modules with forward(input, target) (Note [Forward convention]).

#include <cstdint>

#include "ddp/nn/functional/loss.h"
#include "ddp/nn/module.h"

namespace ddp::nn {

using functional::Reduction;

class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(Reduction reduction = Reduction::mean, double label_smoothing = 0.0,
                            int64_t ignore_index = -100);
  // logits [N, C] (or [N, C, d...], or [C]), target i64 [N] (or [N, d...], or []).
  Tensor forward(const Tensor& logits, const Tensor& target);
  Tensor operator()(const Tensor& logits, const Tensor& target) { return forward(logits, target); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
  double label_smoothing_;
  int64_t ignore_index_;
};

class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::mean);
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

 private:
  Reduction reduction_;
};

}  // namespace ddp::nn
