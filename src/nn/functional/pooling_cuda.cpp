// max_pool2d's CUDA kernels on the tensors' device and current stream.
#include "cuda/max_pool2d.h"
#include "ddp/tensor/cuda.h"
#include "nn/functional/pooling_backend.h"
#include "tensor/cuda_allocator.h"

namespace ddp::nn::functional::pooling_detail {

namespace {
cudaStream_t stream_of(const Tensor& t) {
  return static_cast<cudaStream_t>(cuda::current_stream(t.device().index).handle());
}
}  // namespace

void max_pool2d_cuda(const Tensor& x, Int2 kernel, Int2 stride, Int2 padding, Int2 dilation,
                     const Tensor& y, const Tensor& indices) {
  CudaDeviceGuard guard(x.device().index);
  cuda_kernels::max_pool2d(x, kernel, stride, padding, dilation, y, indices, stream_of(x));
}

void max_pool2d_backward_cuda(const Tensor& dy, const Tensor& indices, const Tensor& dx) {
  CudaDeviceGuard guard(dy.device().index);
  cuda_kernels::max_pool2d_backward(dy, indices, dx, stream_of(dy));
}

}  // namespace ddp::nn::functional::pooling_detail
