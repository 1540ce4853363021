// Build without CUDA: max_pool2d's CUDA entry points cannot be reached.
#include "ddp/core/error.h"
#include "nn/functional/pooling_backend.h"

namespace ddp::nn::functional::pooling_detail {
void max_pool2d_cuda(const Tensor&, Int2, Int2, Int2, Int2, const Tensor&, const Tensor&) {
  DDP_THROW(DeviceError, "max_pool2d: this libddp was built without CUDA");
}
void max_pool2d_backward_cuda(const Tensor&, const Tensor&, const Tensor&) {
  DDP_THROW(DeviceError, "max_pool2d: this libddp was built without CUDA");
}
}  // namespace ddp::nn::functional::pooling_detail
