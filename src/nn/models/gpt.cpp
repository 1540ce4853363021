// See Note [GPT-2 architecture] in include/ddp/nn/models/gpt.h.

#include "ddp/nn/models/gpt.h"

#include <cmath>

#include "ddp/core/error.h"
#include "ddp/nn/functional/activation.h"
#include "ddp/nn/functional/linear.h"
#include "ddp/nn/init.h"
#include "ddp/tensor/ops.h"

namespace ddp::nn::models {

GPTMLP::GPTMLP(int64_t n_embd, double p, bool bias) : UnaryModule("GPTMLP") {
  c_fc = register_module("c_fc", std::make_shared<Linear>(n_embd, 4 * n_embd, bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * n_embd, n_embd, bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
}

namespace {

// c_proj(gelu(c_fc(x))) as one op: the MLP's dropout comes after c_proj, so
// nothing sits between the two layers, and on CUDA c_proj's backward GEMM
// also applies the GELU's derivative and gives c_fc's bias gradient (Note
// [linear_gelu_linear]).
Tensor fc_gelu_proj(const Linear& fc, const Linear& proj, const Tensor& x) {
  return functional::linear_gelu_linear(x, fc.weight, fc.bias, proj.weight, proj.bias);
}

}  // namespace

Tensor GPTMLP::forward(const Tensor& x) {
  // Note [Forward hooks]: c_proj's input exists only inside the fused op,
  // so any hook of c_proj, or a post-hook of c_fc, runs the layers apart.
  if (c_fc->has_forward_hooks() || c_proj->has_forward_pre_hooks() ||
      c_proj->has_forward_hooks())
    return (*dropout)((*c_proj)(functional::gelu((*c_fc)(x), "tanh")));
  Tensors in{x};
  c_fc->run_forward_pre_hooks(in);
  return (*dropout)(fc_gelu_proj(*c_fc, *c_proj, in[0]));
}

GPTBlock::GPTBlock(const GPTConfig& c) : UnaryModule("GPTBlock") {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd, 1e-5, true));
  attn = register_module("attn",
                         std::make_shared<CausalSelfAttention>(c.n_embd, c.n_head, c.dropout, c.bias));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd, 1e-5, true));
  mlp = register_module("mlp", std::make_shared<GPTMLP>(c.n_embd, c.dropout, c.bias));
}

Tensor GPTBlock::forward(const Tensor& x) {
  Tensor y = add(x, (*attn)((*ln_1)(x)));
  return add(y, (*mlp)((*ln_2)(y)));
}

GPT::GPT(GPTConfig c) : UnaryModule("GPT"), config_(c) {
  DDP_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer >= 0 && c.n_head > 0 &&
                c.n_embd > 0 && c.n_embd % c.n_head == 0,
            "GPT: bad config (vocab {}, block {}, layers {}, heads {}, width {})", c.vocab_size,
            c.block_size, c.n_layer, c.n_head, c.n_embd);
  transformer = register_module("transformer", std::make_shared<Module>("GPTTransformer"));
  wte = transformer->register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
  wpe = transformer->register_module("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd));
  drop = transformer->register_module("drop", std::make_shared<Dropout>(c.dropout));
  h = transformer->register_module("h", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<GPTBlock>(c));
  ln_f = transformer->register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd, 1e-5, true));

  // GPT-2's initialisation (Note [GPT-2 architecture]).
  const double proj_std = 0.02 / std::sqrt(2.0 * double(std::max<int64_t>(c.n_layer, 1)));
  for (auto& [name, p] : named_parameters()) {
    const bool is_weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    const bool is_ln = name.find("ln_") != std::string::npos;
    if (is_ln) continue;  // LayerNorm: weight 1, bias 0 already
    if (!is_weight) {
      init::zeros_(p);
    } else if (name.find("c_proj.weight") != std::string::npos) {
      init::normal_(p, 0.0, proj_std);
    } else {
      init::normal_(p, 0.0, 0.02);
    }
  }
}

Tensor GPT::forward(const Tensor& tokens) {
  DDP_CHECK_T(ShapeError, tokens.dim() == 2, "{}: expected tokens [B, T], got {}", describe(),
              tokens.describe());
  const int64_t T = tokens.size(1);
  DDP_CHECK_T(ShapeError, T <= config_.block_size,
              "{}: sequence length {} is longer than the context {} (tokens {})", describe(), T,
              config_.block_size, tokens.describe());
  Tensor pos = arange(T, TensorOptions(DType::i64).device(tokens.device()));
  const Tensor tok = (*wte)(tokens);  // wte runs first: the layers' order is fixed
  Tensor x = (*drop)(add(tok, (*wpe)(pos)));
  for (size_t i = 0; i < h->size(); ++i) x = (*h->at<GPTBlock>(i))(x);
  x = (*ln_f)(x);
  return matmul(x, wte->weight.t());  // the tied LM head
}

std::shared_ptr<GPT> gpt2_124m(double dropout) {
  GPTConfig c;
  c.dropout = dropout;
  return std::make_shared<GPT>(c);
}

}  // namespace ddp::nn::models
