#pragma once
// Activations, like torch.nn.functional's: gelu (exact or tanh form), relu, silu.

#include <string>

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

// approximate = "none": y = x·Φ(x) = ½·x·(1 + erf(x/√2)), the tensor op
// ddp::gelu_erf; "tanh": ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), the
// tensor op ddp::gelu.
// Anything else raises ValueError. x must be floating (DTypeError).
Tensor gelu(const Tensor& x, const std::string& approximate = "none");

// max(x, 0): the tensor op ddp::relu.
Tensor relu(const Tensor& x);
// x·σ(x) (swish), like torch.nn.functional.silu: the tensor op ddp::silu.
Tensor silu(const Tensor& x);

}  // namespace ddp::nn::functional
