#pragma once
// The hand-written fused attention (kernels/cuda/attention.cu, Note [Flash
// attention kernels]): f32/f16/bf16, head sizes 16, 32, 64 and 128. It is not
// registered itself: the CUDA registration of attention_* in
// kernels/cuda/attention_cuda.cpp chooses between it and cuDNN's fused
// attention (Note [Attention paths on CUDA] there). q, k, v, out, dout, dq,
// dk and dv are [B, H, rows, D] with any batch, head and row strides and a
// dense last dim (Note [Strided attention operands] in
// src/nn/functional/attention.cpp; ShapeError otherwise); lse and delta are
// f32 packed [B, H, T]. The caller has made the tensors' device current and
// queues the work on `stream`.

#include <cstdint>

#include "ddp/core/dtype.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/tensor.h"

namespace ddp::cuda_kernels {

// Whether the hand kernel takes this dtype and head size. Inline and free of
// CUDA, so the path decision (kernels/cuda/attention_path.h) and its CPU
// unit test see the same answer as the kernel's dispatch.
constexpr bool flash_attention_supports(DType dtype, int64_t head_size) {
  return (dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16) &&
         (head_size == 16 || head_size == 32 || head_size == 64 || head_size == 128);
}

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, float scale, bool causal, cuda::Stream stream);

void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& dout, const Tensor& lse, const Tensor& delta,
                              const Tensor& dq, const Tensor& dk, const Tensor& dv, float scale,
                              bool causal, cuda::Stream stream);

}  // namespace ddp::cuda_kernels
