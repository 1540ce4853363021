// The fused CUDA attention with its backward (Note [Flash attention kernels]).
// The forward saves q, k, v, the output and the rows' log-sum-exp (f32,
// [B·H, T]) — O(T) extra memory instead of the O(T·S) probabilities.

#include <cuda_runtime.h>

#include "ddp/autograd/node.h"
#include "ddp/core/error.h"
#include "ddp/tensor/cuda.h"
#include "cuda/attention.h"
#include "nn/functional/attention_fused.h"
#include "tensor/cuda_allocator.h"

namespace ddp::nn::functional::detail {

bool fused_attention_supports(const Tensor& q, const Tensor& k) {
  return q.is_cuda() && k.is_cuda() && q.size(3) == k.size(3) &&
         cuda_kernels::flash_attention_supports(q.dtype(), q.size(3));
}

namespace {

TensorOptions on(const Tensor& like, DType dtype) {
  return TensorOptions(dtype).device(like.device());
}

cudaStream_t stream_of(const Tensor& t) {
  return static_cast<cudaStream_t>(cuda::current_stream(t.device().index).handle());
}

}  // namespace

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                       double scale) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), S = k.size(2);
  CudaDeviceGuard guard(q.device().index);
  // [B·H, rows, D] contiguous views of detached inputs (Note [Recording backward]).
  Tensor q3 = q.detach().contiguous().view({B * H, T, D});
  Tensor k3 = k.detach().contiguous().view({B * H, S, D});
  Tensor v3 = v.detach().contiguous().view({B * H, S, D});
  Tensor out = Tensor::empty({B * H, T, D}, on(q, q.dtype()));
  Tensor lse = Tensor::empty({B * H, T}, on(q, DType::f32));
  const float s = float(scale);
  cuda_kernels::flash_attention_forward(q3, k3, v3, out, lse, s, is_causal, stream_of(q));
  Tensor result = out.view({B, H, T, D});
  if (autograd::needs_grad({q, k, v})) {
    autograd::record("scaled_dot_product_attention", {q, k, v}, {result},
                     [q3, k3, v3, out, lse, s, is_causal, B, H, T, S, D](const Tensors& g) {
                       CudaDeviceGuard guard(q3.device().index);
                       Tensor dout = g[0].to(q3.dtype()).contiguous().view({B * H, T, D});
                       Tensor delta = Tensor::empty({B * H, T}, on(q3, DType::f32));
                       Tensor dq = Tensor::empty(q3.shape(), on(q3, q3.dtype()));
                       Tensor dk = Tensor::empty(k3.shape(), on(q3, q3.dtype()));
                       Tensor dv = Tensor::empty(v3.shape(), on(q3, q3.dtype()));
                       cuda_kernels::flash_attention_backward(q3, k3, v3, out, dout, lse, delta,
                                                              dq, dk, dv, s, is_causal,
                                                              stream_of(q3));
                       return Tensors{dq.view({B, H, T, D}), dk.view({B, H, S, D}),
                                      dv.view({B, H, S, D})};
                     });
  }
  return result;
}

}  // namespace ddp::nn::functional::detail
