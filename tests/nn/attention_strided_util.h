#pragma once
// Strided q/k/v for scaled_dot_product_attention (Note [Strided attention
// operands] in src/nn/functional/attention.cpp): the same values laid out as
// GPT's views of a fused [B, T, 3C] qkv projection, as transposed heads, or
// with a last dim that is not dense, run forward and backward and compared
// with contiguous copies of them. Shared by the CPU test
// (attention_strided_test.cpp) and the GPU one (attention_gpu_test.cpp).

#include <gtest/gtest.h>

#include <string>

#include "ddp/nn/attention.h"
#include "ddp/nn/functional/attention.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"

namespace ddp::test::strided_attention {

namespace F = ddp::nn::functional;

enum class Layout {
  contiguous,   // [B, H, T, D] dense: the copying path
  qkv_view,     // heads of one [B, T, 3·H·D] tensor, as CausalSelfAttention has them
  heads_last,   // each of q, k, v dense as [B, T, H, D], transposed to [B, H, T, D]
  strided_dim,  // every other element of a [B, H, T, 2·D] tensor (last stride 2)
};

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::qkv_view: return "qkv view";
    case Layout::heads_last: return "heads last";
    case Layout::strided_dim: return "last stride 2";
  }
  return "?";
}

struct Result {
  Tensor out, dq, dk, dv;  // dq, dk, dv as [B, H, T, D]
  Tensor q, k, v;          // the views the op was called with
};

// q, k, v [B, H, T, D] (one dtype and device) laid out as `layout`, run
// forward (with dout as the output's gradient) and backward.
inline Result run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                  Layout layout, bool causal) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), C = H * D;
  auto leaf = [](const Tensor& t) { return t.detach().set_requires_grad(); };
  Result r;
  switch (layout) {
    case Layout::contiguous: {
      Tensor ql = leaf(q.contiguous()), kl = leaf(k.contiguous()), vl = leaf(v.contiguous());
      r.q = ql, r.k = kl, r.v = vl;
      r.out = F::scaled_dot_product_attention(ql, kl, vl, causal);
      r.out.backward(dout);
      r.dq = ql.grad(), r.dk = kl.grad(), r.dv = vl.grad();
      return r;
    }
    case Layout::qkv_view: {
      auto rows = [&](const Tensor& t) { return t.transpose(1, 2).reshape({B, T, C}); };
      Tensor qkv = leaf(cat({rows(q), rows(k), rows(v)}, 2));  // [B, T, 3C]
      auto heads = [&](int64_t i) {
        return qkv.narrow(2, i * C, C).reshape({B, T, H, D}).transpose(1, 2);
      };
      r.q = heads(0), r.k = heads(1), r.v = heads(2);
      r.out = F::scaled_dot_product_attention(r.q, r.k, r.v, causal);
      r.out.backward(dout);
      auto grad = [&](int64_t i) {
        return qkv.grad().narrow(2, i * C, C).reshape({B, T, H, D}).transpose(1, 2);
      };
      r.dq = grad(0), r.dk = grad(1), r.dv = grad(2);
      return r;
    }
    case Layout::heads_last: {
      Tensor ql = leaf(q.transpose(1, 2).contiguous()), kl = leaf(k.transpose(1, 2).contiguous()),
             vl = leaf(v.transpose(1, 2).contiguous());
      r.q = ql.transpose(1, 2), r.k = kl.transpose(1, 2), r.v = vl.transpose(1, 2);
      r.out = F::scaled_dot_product_attention(r.q, r.k, r.v, causal);
      r.out.backward(dout);
      r.dq = ql.grad().transpose(1, 2), r.dk = kl.grad().transpose(1, 2);
      r.dv = vl.grad().transpose(1, 2);
      return r;
    }
    case Layout::strided_dim: {
      auto spread = [&](const Tensor& t) {  // [B, H, T, 2D] holding t in the even columns
        return leaf(stack({t, zeros_like(t)}, 4).reshape({B, H, t.size(2), 2 * D}));
      };
      Tensor ql = spread(q), kl = spread(k), vl = spread(v);
      auto even = [&](const Tensor& t) { return t.slice(3, 0, 2 * D, 2); };
      r.q = even(ql), r.k = even(kl), r.v = even(vl);
      r.out = F::scaled_dot_product_attention(r.q, r.k, r.v, causal);
      r.out.backward(dout);
      r.dq = even(ql.grad()), r.dk = even(kl.grad()), r.dv = even(vl.grad());
      return r;
    }
  }
  return r;
}

// got and want agree to `tol` (scaled_error; 0: bit for bit).
inline void expect_same(const Result& got, const Result& want, double tol,
                        const std::string& what) {
  EXPECT_LE(scaled_error(got.out, want.out), tol) << what << " out";
  EXPECT_LE(scaled_error(got.dq, want.dq), tol) << what << " dq";
  EXPECT_LE(scaled_error(got.dk, want.dk), tol) << what << " dk";
  EXPECT_LE(scaled_error(got.dv, want.dv), tol) << what << " dv";
}

// Every strided layout against the contiguous one, for q, k, v, dout drawn in
// f32 on the CPU and moved to `dtype` on `dev`.
inline void check_layouts(int64_t B, int64_t H, int64_t T, int64_t D, DType dtype, Device dev,
                          bool causal, double tol) {
  Generator gen(7);
  auto draw = [&] { return randn({B, H, T, D}, {}, &gen).to(dev).to(dtype); };
  Tensor q = draw(), k = draw(), v = draw(), dout = draw();
  const Result want = run(q, k, v, dout, Layout::contiguous, causal);
  for (Layout l : {Layout::qkv_view, Layout::heads_last, Layout::strided_dim}) {
    const std::string what = std::string(dtype_name(dtype)) + (causal ? " causal " : " full ") +
                             layout_name(l) + " D=" + std::to_string(D);
    expect_same(run(q, k, v, dout, l, causal), want, tol, what);
  }
}

// GPT's attention block forward and backward in `dtype` on `dev`: how many
// operands the fused attention copied (attention_operand_copies) and whether
// its output came back in [B, T, H, D] order (transpose(1, 2) dense).
struct BlockRun {
  int64_t copies = 0;
  bool output_heads_last = false;
};
inline BlockRun run_gpt_block(DType dtype, Device dev, int64_t C = 128, int64_t H = 2) {
  nn::CausalSelfAttention block(C, H);
  block.to(dev, dtype);
  Generator gen(3);
  Tensor x = randn({2, 24, C}, {}, &gen).to(dev).to(dtype).set_requires_grad();
  const int64_t before = F::attention_operand_copies();
  Tensor qkv = block.c_attn->forward(x);
  const int64_t D = C / H;
  auto heads = [&](int64_t i) {  // as CausalSelfAttention::forward splits them
    return qkv.narrow(2, i * C, C).reshape({2, 24, H, D}).transpose(1, 2);
  };
  Tensor y = F::scaled_dot_product_attention(heads(0), heads(1), heads(2), true);
  BlockRun r;
  r.output_heads_last = y.transpose(1, 2).is_contiguous();
  Tensor out = block.forward(x);
  sum(out.to(DType::f32)).backward();
  r.copies = F::attention_operand_copies() - before;
  return r;
}

}  // namespace ddp::test::strided_attention
