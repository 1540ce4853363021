#pragma once
// The cuDNN switches themselves (Note [cuDNN TF32] in include/ddp/nn/cudnn.h),
// kept in the core layer so that the cuDNN wrappers under kernels/, which
// stand below the nn layer, read them without including it. Users set them
// through ddp::nn::cudnn, their public face; these are the same flags.

namespace ddp::cudnn_flags {

// DDP_CUDNN_ALLOW_TF32 until set (ValueError on a bad value, at each read
// until one succeeds).
bool allow_tf32();
void set_allow_tf32(bool allow);
// Forgets the flag, so the next allow_tf32() reads the environment again.
void reset_allow_tf32();
// DDP_CUDNN_DETERMINISTIC, read once.
bool deterministic();

}  // namespace ddp::cudnn_flags
