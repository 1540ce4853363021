#pragma once
// nn::Embedding, like torch.nn.Embedding: a lookup table of
// num_embeddings rows of size embedding_dim; forward(index) returns
// index.shape + [embedding_dim]. See ddp/nn/functional/embedding.h.

#include <cstdint>

#include "ddp/nn/module.h"

namespace ddp::nn {

class Embedding : public UnaryModule {
 public:
  // weight [num_embeddings, embedding_dim] ~ N(0, 1), like torch.
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  // DTypeError naming this module for a non-integer index; IndexError
  // ("embedding: index out of range ...") for one outside [0, num_embeddings).
  Tensor forward(const Tensor& index) override;
  std::string extra_repr() const override;

  Tensor weight;

 private:
  int64_t num_, dim_;
};

}  // namespace ddp::nn
