#pragma once
// CausalSelfAttention: GPT-2's multi-head self-attention with a causal mask.
//
//   qkv = c_attn(x)                      one Linear(C, 3C) for q, k and v
//   y   = softmax(q kᵀ / √d, causal) v    per head (d = C / heads), through
//                                         nn::functional::scaled_dot_product_attention
//                                         (fused on CUDA, the reference path on CPU)
//   out = resid_dropout(c_proj(y))
//
// Parameter names are GPT-2's (c_attn.weight, c_attn.bias, c_proj.weight,
// c_proj.bias), stored as nn::Linear ([out, in]) like nanoGPT.

#include <memory>

#include "ddp/nn/dropout.h"
#include "ddp/nn/linear.h"

namespace ddp::nn {

class CausalSelfAttention : public UnaryModule {
 public:
  // embed_dim must be a multiple of num_heads (ValueError).
  CausalSelfAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0,
                      bool bias = true);
  // x: [B, T, embed_dim] -> [B, T, embed_dim]; ShapeError naming this module
  // otherwise.
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }

  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> resid_dropout;

 private:
  int64_t embed_dim_, num_heads_;
};

}  // namespace ddp::nn
