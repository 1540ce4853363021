// See include/ddp/nn/cudnn.h (Note [cuDNN TF32]): the public face of the
// flags in src/core/cudnn_flags.h, which the cuDNN wrappers under kernels/
// read.

#include "ddp/nn/cudnn.h"

#include "core/cudnn_flags.h"

namespace ddp::nn::cudnn {

bool allow_tf32() { return cudnn_flags::allow_tf32(); }
void set_allow_tf32(bool allow) { cudnn_flags::set_allow_tf32(allow); }
void detail::reset_allow_tf32() { cudnn_flags::reset_allow_tf32(); }
bool deterministic() { return cudnn_flags::deterministic(); }

}  // namespace ddp::nn::cudnn
