// The op registry's entries for the dense and sequence ops of
// nn::functional: linear, layer_norm, gelu, dropout, embedding,
// cross_entropy, mse_loss and scaled-dot-product attention (causal and
// not). Registered from here, as the tensor layer may not see nn: see Note
// [Registering ops from higher layers] in tests/tensor/op_registry.h.

#include "ddp/nn/functional/activation.h"
#include "ddp/nn/functional/attention.h"
#include "ddp/nn/functional/dropout.h"
#include "ddp/nn/functional/embedding.h"
#include "ddp/nn/functional/layer_norm.h"
#include "ddp/nn/functional/linear.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/tensor/ops.h"
#include "tensor/op_registry.h"

namespace ddp::nn::functional {
namespace {

using namespace op_samples;

// Scaled-error bounds as tests/nn/dense_gpu_test.cpp's and
// attention_gpu_test.cpp's, with room for gradients that sum over rows.
const std::map<DType, double> kDenseTolerance = {
    {DType::f64, 1e-10}, {DType::f32, 1e-4}, {DType::f16, 4e-3}, {DType::bf16, 2e-2}};
const std::map<DType, double> kAttentionTolerance = {
    {DType::f64, 1e-10}, {DType::f32, 1e-4}, {DType::f16, 1e-2}, {DType::bf16, 5e-2}};

void add_linear_norm(std::vector<OpInfo>& ops) {
  OpInfo lin = make(
      "linear", kFloats, signed_samples({{3, 4, 5}, {6, 5}, {6}}),
      [](const Tensors& in) {
        const Tensor &x = in[0], &w = in[1], &b = in[2];
        return Tensors{linear(x, w, b), linear(x, w), linear(x.transpose(0, 1), w, b)};
      },
      {0, 1, 2});
  lin.cuda_samples = {signed_samples({{4, 256, 768}, {1024, 768}, {1024}})};  // a GPT MLP's first layer
  lin.cuda_scaled_tolerance = kDenseTolerance;
  lin.bad_inputs = {
      bad_input<ShapeError>("in-features that differ", "linear",
                            [](Device d) { linear(zeros({2, 4}, d), zeros({3, 5}, d)); }),
      bad_input<ShapeError>("a 1-D weight", "weight must be [out, in]",
                            [](Device d) { linear(zeros({2, 4}, d), zeros({4}, d)); }),
      bad_input<ShapeError>("a bias of the wrong size", "linear",
                            [](Device d) { linear(zeros({2, 4}, d), zeros({3, 4}, d), zeros({4}, d)); }),
      bad_input<DTypeError>("integer tensors", "linear", [](Device d) {
        linear(zeros({2, 4}, d, DType::i64), zeros({3, 4}, d, DType::i64));
      })};
  ops.push_back(std::move(lin));

  OpInfo ln = make(
      "layer_norm", kFloats, signed_samples({{4, 5, 6}, {6}, {6}}),
      [](const Tensors& in) {
        const Tensor &x = in[0], &w = in[1], &b = in[2];
        const int64_t cols = x.size(-1);
        return Tensors{layer_norm(x, {cols}, w, b),
                       layer_norm(x, {x.size(-2), cols}, {}, {}, 1e-3),
                       layer_norm(x.transpose(0, x.dim() - 2), {cols}, w, {})};  // strided
      },
      {0, 1, 2});
  // Many more rows than columns: GPT-2's width, and a narrow one.
  // Then each path of Note [CUDA LayerNorm kernels]: GPT-2 at 4096 tokens
  // (warp rows, 16-byte vectors), a width no vector divides (elementwise),
  // and wide rows (a block per row, vectorised).
  ln.cuda_samples = {signed_samples({{8192, 768}, {768}, {768}}), signed_samples({{65536, 64}, {64}, {64}}),
                     signed_samples({{4096, 768}, {768}, {768}}), signed_samples({{512, 2050}, {2050}, {2050}}),
                     signed_samples({{256, 4096}, {4096}, {4096}})};
  ln.cuda_scaled_tolerance = kDenseTolerance;
  ln.bad_inputs = {
      bad_input<ShapeError>("trailing dims that differ", "expected an input whose last dims are",
                            [](Device d) { layer_norm(zeros({2, 4}, d), {5}); }),
      bad_input<ShapeError>("a weight of the wrong shape", "weight and bias must have shape",
                            [](Device d) { layer_norm(zeros({2, 4}, d), {4}, zeros({3}, d)); }),
      bad_input<ShapeError>("an empty normalized_shape", "at least one dim",
                            [](Device d) { layer_norm(zeros({2, 4}, d), {}); }),
      bad_input<DTypeError>("an integer input", "layer_norm",
                            [](Device d) { layer_norm(zeros({2, 4}, d, DType::i64), {4}); })};
  ops.push_back(std::move(ln));
}

void add_elementwise(std::vector<OpInfo>& ops) {
  // nn::functional::gelu: the exact form (the op gelu_erf) and the tanh form (gelu).
  OpInfo gelu_op = make(
      "functional_gelu", kFloats, signed_samples({{3, 4}}),
      [](const Tensors& in) {
        return Tensors{functional::gelu(in[0]), functional::gelu(in[0], "tanh"),
                       functional::gelu(in[0].t(), "none")};
      },
      {0});
  gelu_op.bad_inputs = {
      bad_input<ValueError>("an unknown approximation", "approximate must be",
                            [](Device d) { functional::gelu(zeros({2}, d), "erf"); }),
      bad_input<DTypeError>("an integer input", "gelu",
                            [](Device d) { functional::gelu(zeros({2}, d, DType::i64)); })};
  ops.push_back(std::move(gelu_op));

  // Deterministic by seed: each call draws its masks from a fresh generator,
  // and the counter-based RNG gives both devices the same masks.
  OpInfo drop = make(
      "dropout", kFloats, signed_samples({{4, 5}}),
      [](const Tensors& in) {
        Generator g(1234);
        const Tensor& x = in[0];
        return Tensors{dropout(x, 0.3, true, &g), dropout(x.t(), 0.5, true, &g),
                       dropout(x, 0.5, false, &g), dropout(x, 1.0, true, &g)};
      },
      {0});
  drop.bad_inputs = {
      bad_input<ValueError>("p above 1", "p must be in [0, 1]",
                            [](Device d) { dropout(zeros({2}, d), 1.5); }),
      bad_input<ValueError>("a negative p", "p must be in [0, 1]",
                            [](Device d) { dropout(zeros({2}, d), -0.1); })};
  ops.push_back(std::move(drop));
}

void add_lookup_losses(std::vector<OpInfo>& ops) {
  // Index 3 twice, so its row's gradient adds two.
  OpInfo emb = make(
      "embedding", kFloats,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_values({5, 4}, dt, dev, gen),
                       fixed_values({3, 0, 4, 3, 1, 2}, {2, 3}, DType::i64, dev)};
      },
      [](const Tensors& in) {
        const Tensor &w = in[0], &idx = in[1];
        return Tensors{embedding(idx, w), embedding(idx.to(DType::i32), w),
                       embedding(idx.select(0, 1).select(0, 2), w)};  // a 0-dim index
      },
      {0});
  // GPT-2's token table with 4096 lookups drawn from its first 1000 rows, so
  // most rows repeat (the gradient sums runs: Note [Deterministic embedding
  // gradient]).
  emb.cuda_samples = {[](DType dt, Device dev, Generator& gen) {
    return Tensors{signed_values({50257, 768}, dt, dev, gen),
                   uniform_values({8, 512}, 0, 1000, DType::f32, Device::cpu(), gen)
                       .to(dev, DType::i64)};
  }};
  emb.cuda_scaled_tolerance = kDenseTolerance;
  // Index errors on CUDA surface at the next synchronisation (Note [Deferred
  // device errors]): .cpu() is one, so every backend raises inside the case.
  emb.bad_inputs = {
      bad_input<IndexError>("an index out of range", "embedding",
                            [](Device d) {
                              embedding(fixed_values({0, 5}, {2}, DType::i64, d), zeros({5, 4}, d))
                                  .cpu();
                            }),
      bad_input<IndexError>("a negative index", "embedding",
                            [](Device d) {
                              embedding(fixed_values({-1}, {1}, DType::i64, d), zeros({5, 4}, d))
                                  .cpu();
                            }),
      bad_input<DTypeError>("a float index", "embedding",
                            [](Device d) { embedding(zeros({2}, d), zeros({5, 4}, d)); }),
      bad_input<ShapeError>("a 3-D weight", "weight must be [num_embeddings, dim]", [](Device d) {
        embedding(fixed_values({0}, {1}, DType::i64, d), zeros({5, 4, 2}, d));
      })};
  ops.push_back(std::move(emb));

  // logits [N, C] with an ignored row, and [N, C, d1, d2]; target i64.
  OpInfo ce = make(
      "cross_entropy", kFloats,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_values({4, 5}, dt, dev, gen),
                       fixed_values({2, -100, 0, 4}, {4}, DType::i64, dev),
                       signed_values({2, 3, 2, 2}, dt, dev, gen),
                       fixed_values({0, 2, 1, 1, 2, 0, 0, 1}, {2, 2, 2}, DType::i64, dev)};
      },
      [](const Tensors& in) {
        const Tensor &x = in[0], &t = in[1], &x4 = in[2], &t4 = in[3];
        return Tensors{cross_entropy(x, t),
                       cross_entropy(x, t, Reduction::sum),
                       cross_entropy(x, t, Reduction::none),
                       cross_entropy(x, t, Reduction::mean, 0.1),
                       cross_entropy(x4, t4, Reduction::mean, 0.0, 1),
                       cross_entropy(x.select(0, 0), t.select(0, 0))};
      },
      {0, 2});
  // A language model's loss: 4096 tokens over 8192 classes.
  ce.cuda_samples = {[](DType dt, Device dev, Generator& gen) {
    return Tensors{signed_values({4096, 8192}, dt, dev, gen),
                   uniform_values({4096}, 0, 8192, DType::f32, Device::cpu(), gen).to(dev, DType::i64),
                   signed_values({8, 10, 32, 32}, dt, dev, gen),
                   uniform_values({8, 32, 32}, 0, 10, DType::f32, Device::cpu(), gen).to(dev, DType::i64)};
  }};
  // GPT-2's loss: 4096 tokens over its 50257 classes, about one in fifty
  // ignored (-100).
  ce.cuda_samples.push_back([](DType dt, Device dev, Generator& gen) {
    Tensor t = uniform_values({4096}, 0, 50257, DType::f32, Device::cpu(), gen).to(DType::i64);
    std::vector<int64_t> tv = where(lt(t, 1000.0), -100.0, t).to_vector<int64_t>();
    tv[0] = 17;  // run() also takes row 0 alone: an ignored one would give NaN there
    t = Tensor::from_vector(tv, {4096}, opts(DType::i64, Device::cpu()));
    return Tensors{signed_values({4096, 50257}, dt, dev, gen), t.to(dev),
                   signed_values({2, 10, 4, 4}, dt, dev, gen),
                   uniform_values({2, 4, 4}, 0, 10, DType::f32, Device::cpu(), gen).to(dev, DType::i64)};
  });
  ce.cuda_scaled_tolerance = kDenseTolerance;
  auto logits = [](Device d) { return zeros({2, 3}, d); };
  ce.bad_inputs = {
      bad_input<IndexError>("a class out of range", "cross_entropy",
                            [=](Device d) {
                              cross_entropy(logits(d), fixed_values({0, 3}, {2}, DType::i64, d))
                                  .cpu();
                            }),
      bad_input<DTypeError>("an i32 target", "cross_entropy",
                            [=](Device d) {
                              cross_entropy(logits(d), fixed_values({0, 1}, {2}, DType::i32, d));
                            }),
      bad_input<ShapeError>("a target of the wrong shape", "need a target of shape",
                            [=](Device d) {
                              cross_entropy(logits(d), fixed_values({0, 1, 2}, {3}, DType::i64, d));
                            }),
      bad_input<ValueError>("label smoothing above 1", "label_smoothing must be in [0, 1]",
                            [=](Device d) {
                              cross_entropy(logits(d), fixed_values({0, 1}, {2}, DType::i64, d),
                                            Reduction::mean, 1.5);
                            }),
      bad_input<DTypeError>("integer logits", "cross_entropy", [](Device d) {
        cross_entropy(zeros({2, 3}, d, DType::i64), fixed_values({0, 1}, {2}, DType::i64, d));
      })};
  ops.push_back(std::move(ce));

  OpInfo mse = make(
      "mse_loss", kFloats, signed_samples({{3, 4}, {3, 4}}),
      [](const Tensors& in) {
        return Tensors{mse_loss(in[0], in[1]), mse_loss(in[0], in[1], Reduction::sum),
                       mse_loss(in[0], in[1], Reduction::none)};
      },
      {0, 1});
  mse.bad_inputs = {bad_input<ShapeError>("shapes that differ", "mse_loss", [](Device d) {
    mse_loss(zeros({3, 4}, d), zeros({4, 3}, d));
  })};
  ops.push_back(std::move(mse));
}

// q [B, H, T, D], k and v [B, H, S, D]. Head size 16 takes the fused kernel
// on CUDA for f32/f16/bf16 (Note [Attention reference path]), so the CUDA
// run compares the fused kernel with the CPU's reference path.
SampleFn qkv(int64_t b, int64_t h, int64_t t, int64_t s, int64_t d) {
  return signed_samples({{b, h, t, d}, {b, h, s, d}, {b, h, s, d}});
}

std::vector<BadInputCase> attention_bad_inputs(bool causal) {
  auto t = [](Device d, int64_t len, int64_t dim) { return zeros({1, 2, len, dim}, d); };
  std::vector<BadInputCase> cases = {
      bad_input<ShapeError>("3-D inputs", "inputs must be [B, H, T, D]",
                            [=](Device d) {
                              Tensor x = zeros({2, 4, 8}, d);
                              scaled_dot_product_attention(x, x, x, causal);
                            }),
      bad_input<ShapeError>("head sizes that differ", "must agree in batch, heads and head size",
                            [=](Device d) {
                              scaled_dot_product_attention(t(d, 4, 8), t(d, 4, 16), t(d, 4, 16),
                                                           causal);
                            }),
      bad_input<DTypeError>("mixed dtypes", "inputs must share one floating dtype",
                            [=](Device d) {
                              Tensor q = zeros({1, 2, 4, 8}, d, DType::f64);
                              scaled_dot_product_attention(q, t(d, 4, 8), t(d, 4, 8), causal);
                            })};
  if (causal)
    cases.push_back(bad_input<ShapeError>(
        "fewer keys than queries", "a causal mask needs as many keys as queries", [=](Device d) {
          scaled_dot_product_attention(t(d, 4, 8), t(d, 3, 8), t(d, 3, 8), true);
        }));
  return cases;
}

void add_attention(std::vector<OpInfo>& ops) {
  for (bool causal : {false, true}) {
    OpInfo op = make(
        causal ? "scaled_dot_product_attention_causal" : "scaled_dot_product_attention", kFloats,
        causal ? qkv(2, 2, 6, 6, 16) : qkv(2, 2, 5, 7, 16),
        [causal](const Tensors& in) {
          const Tensor &q = in[0], &k = in[1], &v = in[2];
          return Tensors{scaled_dot_product_attention(q, k, v, causal),
                         scaled_dot_product_attention(q, k, v, causal, 0.3),
                         scaled_dot_product_attention_reference(q, k, v, causal)};
        },
        {0, 1, 2});
    // GPT-2's context, at both head sizes the fused kernel is tuned for.
    op.cuda_samples = {qkv(1, 4, 1024, 1024, 64), qkv(1, 4, 1024, 1024, 128)};
    op.cuda_scaled_tolerance = kAttentionTolerance;
    op.bad_inputs = attention_bad_inputs(causal);
    ops.push_back(std::move(op));
  }
}

void add_dense_op_infos(std::vector<OpInfo>& ops) {
  add_linear_norm(ops);
  add_elementwise(ops);
  add_lookup_losses(ops);
  add_attention(ops);
}

const OpInfoRegistrar kDenseOps("nn/functional/dense", add_dense_op_infos);

}  // namespace
}  // namespace ddp::nn::functional
