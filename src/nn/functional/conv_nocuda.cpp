// Build without CUDA: conv2d's cuDNN entry points exist (conv.cpp calls them
// for CUDA tensors) but cannot be reached, since no CUDA tensor can exist.
#include "ddp/core/error.h"
#include "nn/functional/conv_backend.h"

namespace ddp::nn::functional::conv_detail::cudnn {
[[noreturn]] static void no_cuda() {
  DDP_THROW(DeviceError, "conv2d: this libddp was built without CUDA");
}
void forward(const ConvGeometry&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_cuda();
}
void backward_data(const ConvGeometry&, const Tensor&, const Tensor&, const Tensor&) { no_cuda(); }
void backward_weights(const ConvGeometry&, const Tensor&, const Tensor&, const Tensor&,
                      const Tensor&) {
  no_cuda();
}
ConvCacheStats cache_stats() { return {}; }
}  // namespace ddp::nn::functional::conv_detail::cudnn
