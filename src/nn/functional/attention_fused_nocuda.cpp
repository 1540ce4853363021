// Without CUDA there is no fused attention; the reference path runs.

#include "ddp/core/error.h"
#include "nn/functional/attention_fused.h"

namespace ddp::nn::functional::detail {

bool fused_attention_supports(const Tensor&, const Tensor&) { return false; }

Tensor fused_attention(const Tensor&, const Tensor&, const Tensor&, bool, double) {
  DDP_THROW(NotImplementedError, "fused attention: this libddp was built without CUDA");
}

}  // namespace ddp::nn::functional::detail
