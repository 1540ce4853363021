// Hugging Face GPT-2 checkpoints in and out of a GPT.
// See Note [Hugging Face GPT-2 checkpoints] in include/ddp/io/hf_gpt2.h.

#include "ddp/io/hf_gpt2.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "ddp/core/error.h"
#include "ddp/io/safetensors.h"
#include "ddp/tensor/ops.h"

namespace ddp::io {

using nn::models::GPT;
using nn::models::GPTConfig;

namespace {

constexpr const char* kPrefix = "transformer.";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// HF's GPT-2 projections are Conv1D modules whose weight is [in, out].
bool is_conv1d_weight(const std::string& name) {
  return ends_with(name, ".attn.c_attn.weight") || ends_with(name, ".attn.c_proj.weight") ||
         ends_with(name, ".mlp.c_fc.weight") || ends_with(name, ".mlp.c_proj.weight");
}

// The causal-mask buffers older transformers versions saved with the weights.
bool is_mask_buffer(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

std::string without_prefix(const std::string& name) {
  return name.rfind(kPrefix, 0) == 0 ? name.substr(std::string(kPrefix).size()) : name;
}

std::string shape_text(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string config_text(const GPTConfig& c) {
  return fmt::format("vocab {}, context {}, {} layers, {} heads, width {}", c.vocab_size,
                     c.block_size, c.n_layer, c.n_head, c.n_embd);
}

}  // namespace

void load_hf_gpt2(GPT& model, const std::string& path) {
  const std::string where = fmt::format("load_hf_gpt2('{}')", path);
  const TensorDict file = load_safetensors(path);  // IoError naming the file when malformed

  // HF name without "transformer." -> tensor; lm_head kept aside.
  std::map<std::string, Tensor> by_name;
  std::vector<std::string> file_order;
  Tensor lm_head;
  for (const auto& [name, tensor] : file) {
    if (name == "lm_head.weight") {
      lm_head = tensor;
      continue;
    }
    const std::string key = without_prefix(name);
    if (is_mask_buffer(key)) continue;
    DDP_CHECK(by_name.emplace(key, tensor).second,
              "{}: tensor '{}' appears both with and without the 'transformer.' prefix", where,
              key);
    file_order.push_back(key);
  }

  TensorDict converted;
  std::set<std::string> used;
  for (const auto& [name, param] : model.state_dict()) {
    const std::string key = without_prefix(name);
    auto it = by_name.find(key);
    DDP_CHECK(it != by_name.end(),
              "{}: the file has no tensor '{}' (nor '{}{}'), which this GPT ({}) needs", where, key,
              kPrefix, key, config_text(model.config()));
    const bool conv1d = is_conv1d_weight(key);
    const Tensor& stored = it->second;
    Shape expected = param.shape();
    if (conv1d && expected.size() == 2) std::swap(expected[0], expected[1]);
    DDP_CHECK_T(ShapeError, stored.shape() == expected,
                "{}: tensor '{}' is {} in the file but {} in this GPT ({}){}", where, key,
                shape_text(stored.shape()), shape_text(expected), config_text(model.config()),
                conv1d ? " (as Hugging Face's Conv1D stores it, [in, out])" : "");
    converted.insert(name, conv1d ? stored.t().contiguous() : stored);
    used.insert(key);
  }
  for (const std::string& key : file_order)
    DDP_CHECK(used.count(key) != 0,
              "{}: the file has tensor '{}', which this GPT ({}) does not (another config?)", where,
              key, config_text(model.config()));
  if (lm_head.defined()) {
    auto wte = by_name.find("wte.weight");
    DDP_CHECK(lm_head.shape() == wte->second.shape() &&
                  allclose(lm_head.to(kFloat64), wte->second.to(kFloat64), 0.0, 0.0),
              "{}: lm_head.weight differs from wte.weight; this GPT ties its LM head to the token "
              "embedding (Note [GPT-2 architecture]) and cannot load an untied head",
              where);
  }
  model.load_state_dict(converted);
}

void save_hf_gpt2(const GPT& model, const std::string& path) {
  TensorDict out;
  for (const auto& [name, param] : model.state_dict()) {
    const std::string key = without_prefix(name);
    out.insert(kPrefix + key, is_conv1d_weight(key) ? param.t().contiguous() : param);
  }
  // transformers' safetensors loader refuses a file without format=pt.
  save_safetensors(path, out, {{"format", "pt"}});
}

}  // namespace ddp::io
