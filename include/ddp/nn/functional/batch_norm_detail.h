#pragma once
// The pieces of nn::functional::batch_norm (src/nn/functional/batch_norm.cpp)
// that a batch norm built in a layer above nn shares, today SyncBatchNorm
// (src/parallel/sync_batch_norm.cpp): the argument checks, the per-channel
// view and batch_norm's autocast policy, so both check, broadcast and cast
// alike. The running-statistics update is update_running_stat
// (ddp/tensor/running_stats.h). Not meant for applications.

#include <functional>
#include <string>

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional::batch_norm_detail {

// x defined, [N, C, ...] and floating; each defined per-channel tensor [C]
// on x's device. Errors are prefixed by `who`.
void check_args(const std::string& who, const Tensor& x, const Tensors& per_channel);
// [C] viewed as [1, C, 1, ...] to broadcast against an input of this rank.
Tensor per_channel(const Tensor& t, int64_t rank);

// Whether autocast applies to a call made now on this thread (it is on for
// some device type and no enclosing op is already running under it).
bool autocast_active();
// fn({x, weight, bias} cast by batch_norm's autocast policy: keep the
// input's precision) with autocast suspended while fn runs; see Note
// [Autocast policy] in src/tensor/autocast_policy.h.
Tensor autocast_call(const Tensors& x_weight_bias, const std::function<Tensor(const Tensors&)>& fn);

}  // namespace ddp::nn::functional::batch_norm_detail
