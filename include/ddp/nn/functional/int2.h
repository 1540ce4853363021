#pragma once
// Int2 is defined in ddp/core/int2.h (the kernels take it too); the nn names
// ddp::nn::Int2 and ddp::nn::functional::Int2 stay for existing code.

#include "ddp/core/int2.h"

namespace ddp::nn {
using ::ddp::Int2;
namespace functional {
using ::ddp::Int2;
}
}  // namespace ddp::nn
