#include "ddp/nn/activation.h"

#include "ddp/nn/functional/activation.h"

namespace ddp::nn {

GELU::GELU(std::string approximate) : UnaryModule("GELU"), approximate_(std::move(approximate)) {
  DDP_CHECK(approximate_ == "none" || approximate_ == "tanh",
            "GELU: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate_);
}

Tensor GELU::forward(const Tensor& x) {
  DDP_CHECK_T(DTypeError, x.defined() && is_floating(x.dtype()),
              "{}: expected a floating input, got {}", describe(),
              x.defined() ? x.describe() : "an undefined tensor");
  return functional::gelu(x, approximate_);
}

std::string GELU::extra_repr() const { return fmt::format("approximate='{}'", approximate_); }

Tensor SiLU::forward(const Tensor& x) {
  DDP_CHECK_T(DTypeError, x.defined() && is_floating(x.dtype()),
              "{}: expected a floating input, got {}", describe(),
              x.defined() ? x.describe() : "an undefined tensor");
  return functional::silu(x);
}

Tensor ReLU::forward(const Tensor& x) {
  DDP_CHECK(x.defined(), "{}: the input is undefined", describe());
  return functional::relu(x);
}

}  // namespace ddp::nn
