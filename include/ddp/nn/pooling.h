#pragma once
// MaxPool2d and AdaptiveAvgPool2d, like torch.nn's (no parameters); the
// computation is in nn::functional (pooling.h), see Note [Pooling backends].

#include <optional>
#include <string>

#include "ddp/nn/functional/int2.h"
#include "ddp/nn/module.h"

namespace ddp::nn {

// stride defaults to the kernel size, as in torch.
class MaxPool2d : public UnaryModule {
 public:
  explicit MaxPool2d(Int2 kernel_size, std::optional<Int2> stride = std::nullopt, Int2 padding = 0,
                     Int2 dilation = 1);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  Int2 kernel_, stride_, padding_, dilation_;
};

class AdaptiveAvgPool2d : public UnaryModule {
 public:
  explicit AdaptiveAvgPool2d(Int2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  Int2 output_size_;
};

}  // namespace ddp::nn
