#pragma once
// Internal: the pieces of nn::functional::batch_norm (batch_norm.cpp) that
// SyncBatchNorm (src/parallel/sync_batch_norm.cpp) shares: argument checks
// and the per-channel view (the running-statistics update is
// update_running_stat, src/tensor/running_stats.h).

#include <string>

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional::batch_norm_detail {

// x defined, [N, C, ...] and floating; each defined per-channel tensor [C]
// on x's device. Errors are prefixed by `who`.
void check_args(const std::string& who, const Tensor& x, const Tensors& per_channel);
// [C] viewed as [1, C, 1, ...] to broadcast against an input of this rank.
Tensor per_channel(const Tensor& t, int64_t rank);

}  // namespace ddp::nn::functional::batch_norm_detail
