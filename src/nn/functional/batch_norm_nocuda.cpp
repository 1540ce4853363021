// Build without CUDA: no cuDNN batch norm (no CUDA tensor can reach it).
#include "ddp/core/error.h"
#include "nn/functional/batch_norm_backend.h"

namespace ddp::nn::functional::batch_norm_detail {
bool have_cudnn() { return false; }
Tensor batch_norm_train_cudnn(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, double, double) {
  DDP_THROW(DeviceError, "batch_norm: this libddp was built without CUDA");
}
}  // namespace ddp::nn::functional::batch_norm_detail
