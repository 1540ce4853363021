#pragma once
// Scaled dot-product attention, the core of a Transformer block:
//
//   out = softmax(q kᵀ · scale + mask) v
//
// for q of shape [B, H, T, D] and k, v of shape [B, H, S, D] (S = T for
// self-attention), scale = 1/sqrt(D) unless given. With is_causal, position
// t attends to positions ≤ t only (GPT's mask; needs S == T).
//
// Note [Attention reference path]
// This is the straightforward path: the scores are materialised as a
// [B·H, T, S] tensor and every step is an ordinary differentiable op (bmm,
// masked_fill, softmax, bmm), so autograd derives the backward and gradcheck
// covers it in f64. It is what the CPU runs and what the fused GPU kernel
// (Note [Flash attention kernels], which never writes the T×S scores to
// memory) must agree with. On CUDA (Note [Attention paths on CUDA] in
// kernels/cuda/attention_cuda.cpp):
//   - f16/bf16 with a head size that is a multiple of 8 up to 256, on a GPU
//     of compute capability 8.0 or newer: cuDNN's fused attention (tensor
//     cores), when libddp was built with cuDNN and cuDNN builds the graphs
//     (its backward takes heads above 128 on Hopper only);
//   - f32/f16/bf16 with a head size of 16, 32, 64 or 128 otherwise: the
//     hand-written fused kernel (Note [Flash attention kernels]);
//   - anything else (f64, other head sizes, a head size only cuDNN takes
//     when cuDNN refuses either pass): this path, chosen before the forward
//     for both passes, never an error.

#include <optional>

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

// Raises ShapeError when the ranks, batch/head counts, head sizes or (causal)
// lengths disagree, DTypeError for non-floating inputs, DeviceError for
// inputs on different devices.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

// Always the reference path (for tests and for comparing with the fused one).
Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                              bool is_causal = false,
                                              std::optional<double> scale = std::nullopt);

// How many q/k/v operands and incoming gradients the fused attention has
// copied because its kernels could not read them in place (a last dim that
// is not dense, misaligned data or strides, k and v in different layouts;
// Note [Strided attention operands] in src/nn/functional/attention.cpp).
// GPT's q/k/v views of its qkv projection and contiguous inputs make none.
// Process-wide, for tests and profiling; the CPU (no fused kernel) never
// counts.
int64_t attention_operand_copies();

// How often the fused attention found its cuDNN graph (one per shape, dtype,
// mask, scale and pass) already built: for tests and tuning. The counts are
// process-wide; entries is the cache's current size (refusals included).
// All zero on devices whose fused attention does not use cuDNN.
struct AttentionCacheStats {
  int64_t entries = 0, hits = 0, misses = 0;
};
AttentionCacheStats attention_cache_stats(DeviceType device);

}  // namespace ddp::nn::functional
