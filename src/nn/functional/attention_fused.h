#pragma once
// The fused CUDA path of scaled_dot_product_attention (Note [Flash attention
// kernels] in kernels/cuda/attention.cu). Internal to src/nn.

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional::detail {

// True when q, k, v can take the fused kernel: CUDA, f32/f16/bf16, head size
// 16/32/64/128. Always false in a build without CUDA.
bool fused_attention_supports(const Tensor& q, const Tensor& k);

// The fused kernel with autograd; arguments already checked.
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                       double scale);

}  // namespace ddp::nn::functional::detail
