#include "ddp/nn/attention.h"

#include "ddp/core/error.h"
#include "ddp/nn/functional/attention.h"

namespace ddp::nn {

CausalSelfAttention::CausalSelfAttention(int64_t embed_dim, int64_t num_heads, double dropout,
                                         bool bias)
    : UnaryModule("CausalSelfAttention"), embed_dim_(embed_dim), num_heads_(num_heads) {
  DDP_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
            "CausalSelfAttention: embed_dim {} must be a positive multiple of num_heads {}",
            embed_dim, num_heads);
  c_attn = register_module("c_attn", std::make_shared<Linear>(embed_dim, 3 * embed_dim, bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(dropout));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  DDP_CHECK_T(ShapeError, x.dim() == 3 && x.size(2) == embed_dim_,
              "{}: expected input [B, T, {}], got {}", describe(), embed_dim_, x.describe());
  const int64_t B = x.size(0), T = x.size(1), C = embed_dim_, H = num_heads_, D = C / H;
  Tensor qkv = (*c_attn)(x);  // [B, T, 3C]
  // The i-th C-wide slice as a [B, H, T, D] view, passed without a copy; the
  // output comes back dense in the views' [B, T, H, D] order, so the reshape
  // to [B, T, C] is a view too (Note [Strided attention operands]; the
  // reference path, which copies, returns [B, H, T, D] and the reshape copies).
  auto heads = [&](int64_t i) {
    return qkv.narrow(2, i * C, C).reshape({B, T, H, D}).transpose(1, 2);
  };
  Tensor y = functional::scaled_dot_product_attention(heads(0), heads(1), heads(2), true);
  y = y.transpose(1, 2).reshape({B, T, C});
  return (*resid_dropout)((*c_proj)(y));
}

std::string CausalSelfAttention::extra_repr() const {
  return "embed_dim=" + std::to_string(embed_dim_) + ", num_heads=" + std::to_string(num_heads_);
}

}  // namespace ddp::nn
