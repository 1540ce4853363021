#include "ddp/nn/embedding.h"

#include "ddp/nn/functional/embedding.h"
#include "ddp/nn/init.h"

namespace ddp::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : UnaryModule("Embedding"), num_(num_embeddings), dim_(embedding_dim) {
  DDP_CHECK(num_ >= 0 && dim_ >= 0,
            "Embedding: num_embeddings and embedding_dim must be >= 0, got {} and {}", num_, dim_);
  weight = register_parameter("weight", Tensor::empty({num_, dim_}));
  init::normal_(weight);
}

Tensor Embedding::forward(const Tensor& index) {
  DDP_CHECK_T(DTypeError,
              index.defined() && (index.dtype() == DType::i64 || index.dtype() == DType::i32),
              "{}: expected an integer index (i64 or i32), got {}", describe(),
              index.defined() ? index.describe() : "an undefined tensor");
  // The range check (IndexError) is functional::embedding's.
  return functional::embedding(index, weight);
}

std::string Embedding::extra_repr() const { return fmt::format("{}, {}", num_, dim_); }

}  // namespace ddp::nn
