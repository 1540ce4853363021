#pragma once
// Launchers of the fused attention kernels (kernels/cuda/attention.cu; Note
// [Flash attention kernels]). Tensors are contiguous, viewed as
// [batch·heads, rows, head]: q, out, dout, dq [BH, T, D]; k, v, dk, dv
// [BH, S, D]; lse and delta f32 [BH, T]. The caller has made the tensors'
// device current and checked flash_attention_supports().

#include <cuda_runtime.h>

#include <cstdint>

#include "ddp/tensor/tensor.h"

namespace ddp::cuda_kernels {

// f32, f16 or bf16, and a head size of 16, 32, 64 or 128.
bool flash_attention_supports(DType dtype, int64_t head);

// out = softmax(q kᵀ · scale, causal) v; lse = the rows' log-sum-exp.
void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, float scale, bool causal, cudaStream_t stream);

// dq, dk, dv from dout; delta is scratch [BH, T].
void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& dout, const Tensor& lse, const Tensor& delta,
                              const Tensor& dq, const Tensor& dk, const Tensor& dv, float scale,
                              bool causal, cudaStream_t stream);

}  // namespace ddp::cuda_kernels
