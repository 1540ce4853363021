#pragma once
// Embedding lookup, like torch.nn.functional.embedding: out[..., :] =
// weight[index[...], :] for an integer index of any shape and weight
// [num_embeddings, embedding_dim]; the result is index.shape + [dim].
//
// Forward is index_select (a gather) on the rows of weight; its backward
// scatter-adds the output gradient into the rows of dweight, so an index
// that occurs twice gets both gradients.

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

// DTypeError for a non-integer index (i32 or i64 expected), IndexError for
// an index outside [0, num_embeddings) (reads the index's range on the host),
// ShapeError when weight is not 2-D.
Tensor embedding(const Tensor& index, const Tensor& weight);

}  // namespace ddp::nn::functional
