#include "ddp/nn/linear.h"

#include <cmath>

#include "ddp/nn/functional/linear.h"
#include "ddp/nn/init.h"

namespace ddp::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias)
    : UnaryModule("Linear"), in_(in_features), out_(out_features) {
  DDP_CHECK(in_features >= 0 && out_features >= 0,
            "Linear: in_features and out_features must be >= 0, got {} and {}", in_features,
            out_features);
  weight = register_parameter("weight", Tensor::empty({out_, in_}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  Tensor b;
  if (with_bias) {
    b = Tensor::empty({out_});
    // torch's bound: 1/√fan_in, 0 when there are no inputs.
    const double bound = in_ > 0 ? 1.0 / std::sqrt(double(in_)) : 0.0;
    init::uniform_(b, -bound, bound);
  }
  bias = register_parameter("bias", b);
}

void Linear::check_input(const Tensor& x) const {
  DDP_CHECK_T(ShapeError, x.defined() && x.dim() >= 1 && x.size(-1) == in_,
              "{}: expected an input [..., {}], got {}", describe(), in_,
              x.defined() ? x.describe() : "an undefined tensor");
}

Tensor Linear::forward(const Tensor& x) {
  check_input(x);
  return functional::linear(x, weight, bias);
}

Tensor Linear::forward_gelu(const Tensor& x) {
  check_input(x);
  return functional::linear_gelu(x, weight, bias);
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_, out_, bias.defined());
}

}  // namespace ddp::nn
