#pragma once
// The running-statistics update of the batch-norm family, shared by
// batch_norm's composite path and SyncBatchNorm: running = (1 − m)·running +
// m·value, in place and unrecorded, value cast to running's dtype. An
// undefined running tensor (track_running_stats = false) is left alone. The
// CPU batch-norm kernels make the same update, bit for bit, in their own
// loop (Note [Running statistics on the CPU] in kernels/cpu/batch_norm.cpp),
// as kernels use no ops frontend. Public (not meant for applications)
// because its users span two layers: nn and parallel.

#include "ddp/autograd/grad_mode.h"
#include "ddp/tensor/tensor.h"

namespace ddp {

inline void update_running_stat(const Tensor& running, const Tensor& value, double momentum) {
  if (!running.defined()) return;
  autograd::NoGradGuard no_grad;
  Tensor r = running;
  r.mul_(1.0 - momentum).add_(value.detach().to(running.dtype()), momentum);
}

}  // namespace ddp
