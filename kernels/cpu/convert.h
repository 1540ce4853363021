#pragma once
// The CPU kernels' scalar conversions: see Note [Scalar casts] in
// kernels/common/scalar_cast.h, shared with the CUDA kernels.

#include "common/scalar_cast.h"

namespace ddp::cpu_kernels {
using kernels::cast_to;
using kernels::float_to_i64;
using kernels::is_float_like;
using kernels::is_half_like;
using kernels::load;
using kernels::store;
}  // namespace ddp::cpu_kernels
