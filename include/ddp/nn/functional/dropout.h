#pragma once
// Dropout, like torch.nn.functional.dropout: in training each element is
// zeroed with probability p and the others scaled by 1/(1-p); otherwise (or
// with p = 0) the input is returned as is.

#include "ddp/tensor/generator.h"
#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

// The keep mask comes from rand() on x's device, i.e. from the Philox
// generator `gen` (default_generator() when null; Note [Counter-based RNG]),
// so CPU and CUDA drop the same elements for the same seed and offset.
// ValueError unless 0 <= p <= 1; DTypeError for non-floating x.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);

}  // namespace ddp::nn::functional
