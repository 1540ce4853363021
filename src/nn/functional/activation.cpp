// gelu (both forms), relu and silu: each is an elementwise tensor op of
// ddp/tensor/op_list.h (Note [One list per op family]); these are the
// torch.nn.functional-style names with their argument checks.

#include "ddp/nn/functional/activation.h"

#include "ddp/tensor/ops.h"
#include "nn/functional/checks.h"

namespace ddp::nn::functional {

Tensor gelu(const Tensor& x, const std::string& approximate) {
  const char* op = "gelu";
  detail::check_floating(op, x, "input");
  DDP_CHECK(approximate == "none" || approximate == "tanh",
            "{}: approximate must be \"none\" or \"tanh\", got \"{}\"", op, approximate);
  return approximate == "tanh" ? ddp::gelu(x) : ddp::gelu_erf(x);
}

Tensor relu(const Tensor& x) { return ddp::relu(x); }

Tensor silu(const Tensor& x) {
  detail::check_floating("silu", x, "input");
  return ddp::silu(x);
}

}  // namespace ddp::nn::functional
