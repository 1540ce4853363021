#pragma once
// OrderedDict and TensorDict are defined in ddp/tensor/ordered_dict.h (optim,
// amp and io use them as well as nn); the nn names stay for existing code.

#include "ddp/tensor/ordered_dict.h"

namespace ddp::nn {
using ::ddp::OrderedDict;
using ::ddp::TensorDict;
}  // namespace ddp::nn
