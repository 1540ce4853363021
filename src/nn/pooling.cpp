#include "ddp/nn/pooling.h"

#include <fmt/format.h>

#include "ddp/nn/functional/pooling.h"

namespace ddp::nn {

MaxPool2d::MaxPool2d(Int2 kernel_size, std::optional<Int2> stride, Int2 padding, Int2 dilation)
    : UnaryModule("MaxPool2d"),
      kernel_(kernel_size),
      stride_(stride.value_or(kernel_size)),
      padding_(padding),
      dilation_(dilation) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  return functional::max_pool2d(x, kernel_, stride_, padding_, dilation_, describe());
}

std::string MaxPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}", kernel_.str(),
                     stride_.str(), padding_.str(), dilation_.str());
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Int2 output_size)
    : UnaryModule("AdaptiveAvgPool2d"), output_size_(output_size) {}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  return functional::adaptive_avg_pool2d(x, output_size_, describe());
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return fmt::format("output_size={}", output_size_.str());
}

}  // namespace ddp::nn
