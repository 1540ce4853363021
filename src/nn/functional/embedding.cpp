// embedding: index_select along dim 0 of weight (a gather, whose backward is
// scatter_add); see include/ddp/nn/functional/embedding.h.

#include "ddp/nn/functional/embedding.h"

#include "ddp/tensor/ops.h"
#include "nn/functional/checks.h"

namespace ddp::nn::functional {

Tensor embedding(const Tensor& index, const Tensor& weight) {
  const char* op = "embedding";
  detail::check_defined(op, index, "index");
  detail::check_floating(op, weight, "weight");
  DDP_CHECK_T(DTypeError, index.dtype() == DType::i64 || index.dtype() == DType::i32,
              "{}: index must be an integer tensor (i64 or i32), got {}", op, index.describe());
  DDP_CHECK_T(DeviceError, index.device() == weight.device(),
              "{}: index {} and weight {} are on different devices", op, index.describe(),
              weight.describe());
  DDP_CHECK_T(ShapeError, weight.dim() == 2, "{}: weight must be [num_embeddings, dim], got {}", op,
              weight.describe());
  const int64_t num = weight.size(0);
  if (index.numel() > 0) {
    // One host read of the range, for an error that names the embedding
    // (index_select would check again, naming itself).
    const int64_t lo = ddp::min(index).item<int64_t>(), hi = ddp::max(index).item<int64_t>();
    DDP_CHECK_T(IndexError, lo >= 0 && hi < num,
                "{}: index out of range: values span [{}, {}] but num_embeddings is {}", op, lo, hi,
                num);
  }
  Shape out_shape = index.shape();
  out_shape.push_back(weight.size(1));
  return index_select(weight, 0, index.reshape({-1})).reshape(out_shape);
}

}  // namespace ddp::nn::functional
