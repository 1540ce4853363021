// The op registry's entry for scaled-dot-product attention in the training
// dtypes f16 and bf16 at GPT-2's sizes: on CUDA its samples reach cuDNN's
// fused attention, the hand kernel's stand-in and the reference path (Note
// [Attention paths on CUDA] in attention_cuda.cpp), each against the CPU's
// reference path. The f32/f64 entries are in op_infos_dense.cpp. Registered
// from here, as the tensor layer may not see nn: see Note [Registering ops
// from higher layers] in tests/tensor/op_registry.h.

#include "ddp/nn/functional/attention.h"
#include "ddp/tensor/ops.h"
#include "tensor/op_registry.h"

namespace ddp::nn::functional {
namespace {

using namespace op_samples;

constexpr const char* kName = "scaled_dot_product_attention_half";

// q, k, v [B, H, T, D] (self-attention: the causal outputs need S = T).
SampleFn self_attention(int64_t b, int64_t h, int64_t t, int64_t d) {
  return [=](DType dt, Device dev, Generator& gen) {
    Tensors x;
    for (int i = 0; i < 3; ++i) x.push_back(signed_values({b, h, t, d}, dt, dev, gen));
    return x;
  };
}

std::vector<BadInputCase> half_bad_inputs() {
  auto t = [](Device d, int64_t len, int64_t dim, DType dt) {
    return zeros({1, 2, len, dim}, d, dt);
  };
  return {
      bad_input<DTypeError>("f16 queries with bf16 keys and values",
                            "scaled_dot_product_attention: inputs must share one floating dtype",
                            [=](Device d) {
                              scaled_dot_product_attention(t(d, 4, 64, DType::f16),
                                                           t(d, 4, 64, DType::bf16),
                                                           t(d, 4, 64, DType::bf16), true);
                            }),
      bad_input<DTypeError>("i32 inputs",
                            "scaled_dot_product_attention: inputs must share one floating dtype",
                            [=](Device d) {
                              Tensor x = t(d, 4, 64, DType::i32);
                              scaled_dot_product_attention(x, x, x, true);
                            }),
      bad_input<ShapeError>("bf16 values shorter than the keys",
                            "must agree in batch, heads and head size",
                            [=](Device d) {
                              scaled_dot_product_attention(t(d, 4, 64, DType::bf16),
                                                           t(d, 4, 64, DType::bf16),
                                                           t(d, 3, 64, DType::bf16), false);
                            }),
      bad_input<ShapeError>("f16 causal with fewer keys than queries",
                            "a causal mask needs as many keys as queries",
                            [=](Device d) {
                              scaled_dot_product_attention(t(d, 8, 64, DType::f16),
                                                           t(d, 4, 64, DType::f16),
                                                           t(d, 4, 64, DType::f16), true);
                            }),
      bad_input<ShapeError>("f16 [B, T, D] inputs",
                            "scaled_dot_product_attention: inputs must be [B, H, T, D]",
                            [=](Device d) {
                              Tensor x = zeros({2, 4, 64}, d, DType::f16);
                              scaled_dot_product_attention(x, x, x, true);
                            })};
}

void add_attention_half(std::vector<OpInfo>& ops) {
  OpInfo op = make(
      kName, {DType::f16, DType::bf16}, self_attention(2, 2, 6, 16),
      [](const Tensors& in) {
        const Tensor &q = in[0], &k = in[1], &v = in[2];
        return Tensors{scaled_dot_product_attention(q, k, v, /*is_causal=*/true),
                       scaled_dot_product_attention(q, k, v, /*is_causal=*/false),
                       scaled_dot_product_attention(q, k, v, /*is_causal=*/true, 0.3)};
      },
      {0, 1, 2});
  op.cuda_samples = {
      self_attention(2, 12, 256, 64),  // GPT-2 small's heads: cuDNN
      self_attention(1, 4, 77, 40),    // a length off every tile, a head only cuDNN takes
      self_attention(1, 3, 50, 33),    // an odd head size: the reference path on both sides
  };
  // Scaled errors as the f16/bf16 entries of op_infos_dense.cpp: the CPU's
  // reference path rounds the scores and probabilities to the dtype, the
  // fused paths keep them in f32.
  op.cuda_scaled_tolerance = {{DType::f16, 1e-2}, {DType::bf16, 5e-2}};
  op.bad_inputs = half_bad_inputs();
  ops.push_back(std::move(op));
}

const OpInfoRegistrar kAttentionOps("nn/functional/attention", add_attention_half);

}  // namespace
}  // namespace ddp::nn::functional
