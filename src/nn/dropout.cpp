#include "ddp/nn/dropout.h"

#include "ddp/nn/functional/dropout.h"

namespace ddp::nn {

Dropout::Dropout(double p) : UnaryModule("Dropout"), p_(p) {
  DDP_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got {}", p);
}

Tensor Dropout::forward(const Tensor& x) {
  DDP_CHECK_T(DTypeError, x.defined() && is_floating(x.dtype()),
              "{}: expected a floating input, got {}", describe(),
              x.defined() ? x.describe() : "an undefined tensor");
  return functional::dropout(x, p_, is_training());
}

std::string Dropout::extra_repr() const { return fmt::format("p={}", p_); }

}  // namespace ddp::nn
