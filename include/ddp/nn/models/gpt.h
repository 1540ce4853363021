#pragma once
// GPT: the GPT-2 architecture, with GPT-2's (Hugging Face / nanoGPT) names:
// "transformer.wte.weight", "transformer.h.0.attn.c_attn.weight",
// "transformer.h.11.mlp.c_proj.bias", "transformer.ln_f.weight".
//
//   auto model = ddp::nn::models::gpt2_124m();        // 124,439,808 parameters
//   Tensor logits = model->forward(tokens);           // [B, T] i64 -> [B, T, vocab]
//
// Note [GPT-2 architecture]
// Token and position embeddings are added (and dropped out), then n_layer
// pre-LayerNorm blocks x += attn(ln_1(x)); x += mlp(ln_2(x)) with causal
// multi-head self-attention and a 4× MLP with tanh-GELU, then a final
// LayerNorm. The LM head is tied to the token embedding: logits = x · wteᵀ,
// with no parameter of its own (so the count includes the 38.6 M embedding
// once, as GPT-2's 124 M does). Initialisation follows GPT-2: weights
// normal(0, 0.02), biases 0, the residual projections (attn.c_proj,
// mlp.c_proj) normal(0, 0.02 / √(2·n_layer)), LayerNorm weight 1 bias 0.

#include <memory>
#include <string>
#include <vector>

#include "ddp/nn/attention.h"
#include "ddp/nn/container.h"
#include "ddp/nn/dropout.h"
#include "ddp/nn/embedding.h"
#include "ddp/nn/layer_norm.h"
#include "ddp/nn/linear.h"

namespace ddp::nn::models {

struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  // the context: the longest sequence
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;
  bool bias = true;  // biases in the Linears and LayerNorms, as GPT-2
};

class GPTMLP : public UnaryModule {
 public:
  GPTMLP(int64_t n_embd, double dropout, bool bias);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> dropout;
};

class GPTBlock : public UnaryModule {
 public:
  explicit GPTBlock(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<GPTMLP> mlp;
};

class GPT : public UnaryModule {
 public:
  explicit GPT(GPTConfig config);
  // tokens: i64 [B, T] with T <= block_size -> logits [B, T, vocab_size].
  // ShapeError naming the module for a longer sequence or another rank.
  Tensor forward(const Tensor& tokens) override;
  const GPTConfig& config() const { return config_; }

  std::shared_ptr<Module> transformer;  // holds wte, wpe, drop, h, ln_f
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList> h;
  std::shared_ptr<LayerNorm> ln_f;

 private:
  GPTConfig config_;
};

// GPT-2 small: 12 layers, 12 heads, 768 wide, vocab 50257, context 1024.
std::shared_ptr<GPT> gpt2_124m(double dropout = 0.0);

// Hugging Face GPT-2 checkpoints: io::load_hf_gpt2 / io::save_hf_gpt2
// (ddp/io/hf_gpt2.h); nn reads and writes no file (Note [Layering of io]).

// ---- sampling ------------------------------------------------------------------

// Note [Sampling from a GPT]
// Each new token is drawn from softmax(logits / temperature) restricted to
// the top_k largest logits (ties broken towards the lower index), so
// top_k = 1 is greedy argmax whatever the temperature. The draw inverts the
// cumulative distribution at u = 53 bits of a std::mt19937_64 seeded with
// `seed`, a fully specified sequence, so a seed gives the same text on every
// machine. The model sees at most its last block_size tokens, runs in eval
// mode without autograd, and gets its training mode back afterwards.
struct SamplingOptions {
  double temperature = 1.0;  // > 0
  int64_t top_k = 0;         // > 0: only the k most likely tokens; 0: all
  // > 0: draw only among the first vocab_limit tokens (a byte-level model
  // with GPT-2's 50257-row embedding samples bytes); 0: the whole vocabulary.
  int64_t vocab_limit = 0;
  uint64_t seed = 0;
};

// The distribution sample_from draws from; ValueError for a temperature
// that is not a positive finite number or a negative top_k.
std::vector<double> sampling_probabilities(const std::vector<float>& logits, double temperature,
                                           int64_t top_k);
// The first token whose cumulative probability exceeds u (u in [0, 1)).
int64_t sample_from(const std::vector<double>& probabilities, double u);
// prompt (token ids, at least one) continued by n sampled tokens; returns
// only the n new ones.
std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt, int64_t n,
                              const SamplingOptions& options = {});

}  // namespace ddp::nn::models
