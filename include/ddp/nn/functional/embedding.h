#pragma once
// Embedding lookup, like torch.nn.functional.embedding: out[..., :] =
// weight[index[...], :] for an integer index of any shape and weight
// [num_embeddings, embedding_dim]; the result is index.shape + [dim].
//
// Forward gathers rows of weight; backward sums the output gradient into the
// rows of dweight, so an index that occurs twice gets both gradients (summed
// in a fixed order: deterministic). Neither waits for the device.

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

// DTypeError for a non-integer index (i32 or i64 expected), ShapeError when
// weight is not 2-D, IndexError for an index outside [0, num_embeddings):
// raised at once on the CPU; on CUDA at the next synchronisation point (a
// copy to the host, .item(), cuda::synchronize), naming "embedding", the
// value and its position (Deferred device errors in docs/nn.md).
Tensor embedding(const Tensor& index, const Tensor& weight);

}  // namespace ddp::nn::functional
