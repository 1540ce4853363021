// Hugging Face GPT-2 checkpoints (ddp/io/hf_gpt2.h, Note [Hugging Face
// GPT-2 checkpoints]) against PyTorch: tests/golden/make_hf_gpt2_golden.py
// wrote a tiny GPT-2 in HF's exact state-dict layout (transformer. prefix,
// Conv1D [in, out] weights, attn.bias / attn.masked_bias buffers, tied
// lm_head) and its logits for fixed tokens. Variants of that file (no
// prefix, no lm_head, an untied head, a wrong config, a truncated file)
// are written here from it.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ddp/io/hf_gpt2.h"
#include "ddp/io/safetensors.h"
#include "ddp/nn/models/gpt.h"
#include "ddp/tensor/ops.h"
#include "golden_file.h"
#include "nn/nn_test_util.h"
#include "nn/scaled_error.h"
#include "scratch_dir.h"

namespace ddp::test {
namespace {

using namespace ddp::nn::models;
using ddp::io::load_hf_gpt2;
using ddp::io::save_hf_gpt2;

const std::string kCheckpoint =
    std::string(DDP_TEST_DATA_DIR) + "/golden/hf_gpt2/model.safetensors";

GPTConfig tiny_config() {  // the script's VOCAB, CONTEXT, LAYERS, HEADS, WIDTH
  GPTConfig c;
  c.vocab_size = 256, c.block_size = 16, c.n_layer = 2, c.n_head = 4, c.n_embd = 32;
  return c;
}

// The golden logits for the golden tokens, from a model loaded with load_hf_gpt2.
double logits_error(GPT& model) {
  model.eval();
  Tensor logits = model.forward(golden_file("hf_gpt2").at("tokens"));
  return scaled_error(logits, golden_file("hf_gpt2").at("logits"));
}

TEST(HfGpt2, LoadsHuggingFaceLayoutAndMatchesTorchLogits) {
  GPT model(tiny_config());
  load_hf_gpt2(model, kCheckpoint);
  EXPECT_LE(logits_error(model), 1e-5);
  // The Conv1D weight went in transposed: c_attn is [3C, C] in libddp, [C, 3C] in the file.
  const nn::TensorDict file = io::load_safetensors(kCheckpoint);
  EXPECT_TRUE(allclose(model.h->at<GPTBlock>(0)->attn->c_attn->weight,
                       file.at("transformer.h.0.attn.c_attn.weight").t(), 0, 0));
}

TEST(HfGpt2, PrefixAndLmHeadAreOptional) {
  ScratchDir dir;
  nn::TensorDict bare;  // GPT2Model's names, no lm_head, no mask buffers
  for (const auto& [name, t] : io::load_safetensors(kCheckpoint)) {
    if (name == "lm_head.weight" || name.find(".attn.bias") != std::string::npos ||
        name.find("masked_bias") != std::string::npos)
      continue;
    bare.insert(name.substr(std::string("transformer.").size()), t);
  }
  io::save_safetensors(dir.path("bare.safetensors"), bare);
  GPT model(tiny_config());
  load_hf_gpt2(model, dir.path("bare.safetensors"));
  EXPECT_LE(logits_error(model), 1e-5);
}

TEST(HfGpt2, SaveWritesHuggingFaceLayoutThatLoadsBack) {
  ScratchDir dir;
  GPT original(tiny_config());
  load_hf_gpt2(original, kCheckpoint);
  save_hf_gpt2(original, dir.path("out.safetensors"));
  io::Metadata meta;
  const nn::TensorDict saved = io::load_safetensors(dir.path("out.safetensors"), &meta);
  EXPECT_EQ(meta["format"], "pt");
  const nn::TensorDict file = io::load_safetensors(kCheckpoint);
  // Every learned tensor of the HF file, under its HF name and shape, with its values.
  int compared = 0;
  for (const auto& [name, t] : file) {
    if (name == "lm_head.weight" || name.find(".attn.bias") != std::string::npos ||
        name.find("masked_bias") != std::string::npos)
      continue;
    ASSERT_TRUE(saved.contains(name)) << name;
    EXPECT_EQ(saved.at(name).shape(), t.shape()) << name;
    EXPECT_TRUE(allclose(saved.at(name), t, 0, 0)) << name;
    ++compared;
  }
  EXPECT_EQ(compared, int(saved.size()));
  EXPECT_EQ(compared, 2 + 2 * 12 + 2) << "wte, wpe, 12 per block, ln_f";
  GPT reloaded(tiny_config());
  load_hf_gpt2(reloaded, dir.path("out.safetensors"));
  EXPECT_LE(logits_error(reloaded), 1e-5);
}

TEST(HfGpt2, WrongConfigNamesTheFirstMismatchedTensorAndBothShapes) {
  GPTConfig wide = tiny_config();
  wide.n_embd = 48;
  GPT model(wide);
  EXPECT_DDP_ERROR(load_hf_gpt2(model, kCheckpoint), ShapeError,
                   "tensor 'wte.weight' is [256, 32] in the file but [256, 48] in this GPT");
  GPTConfig longer = tiny_config();
  longer.block_size = 32;
  GPT model2(longer);
  EXPECT_DDP_ERROR(load_hf_gpt2(model2, kCheckpoint), ShapeError,
                   "tensor 'wpe.weight' is [16, 32] in the file but [32, 32]");
  GPTConfig deeper = tiny_config();
  deeper.n_layer = 3;
  GPT model3(deeper);
  EXPECT_DDP_ERROR(load_hf_gpt2(model3, kCheckpoint), ValueError,
                   "the file has no tensor 'h.2.ln_1.weight'");
  GPTConfig shallower = tiny_config();
  shallower.n_layer = 1;
  GPT model4(shallower);
  EXPECT_DDP_ERROR(load_hf_gpt2(model4, kCheckpoint), ValueError,
                   "the file has tensor 'h.1.ln_1.weight', which this GPT");
}

TEST(HfGpt2, RefusesAnUntiedLmHeadAndLeavesTheModelUnchanged) {
  ScratchDir dir;
  nn::TensorDict file = io::load_safetensors(kCheckpoint);
  file.at("lm_head.weight") = add(file.at("lm_head.weight"), 1.0);
  io::save_safetensors(dir.path("untied.safetensors"), file);
  GPT model(tiny_config());
  const Tensor before = model.wte->weight.clone();
  EXPECT_DDP_ERROR(load_hf_gpt2(model, dir.path("untied.safetensors")), ValueError,
                   "lm_head.weight differs from wte.weight");
  EXPECT_TRUE(allclose(model.wte->weight, before, 0, 0));
}

TEST(HfGpt2, TruncatedOrMissingFileIsAClearErrorNamingIt) {
  ScratchDir dir;
  const std::string cut = dir.path("cut.safetensors");
  std::filesystem::copy_file(kCheckpoint, cut);
  std::filesystem::resize_file(cut, std::filesystem::file_size(cut) - 100);
  GPT model(tiny_config());
  EXPECT_DDP_ERROR(load_hf_gpt2(model, cut), IoError, "cut.safetensors");
  EXPECT_DDP_ERROR(load_hf_gpt2(model, dir.path("absent.safetensors")), IoError,
                   "absent.safetensors");
}

}  // namespace
}  // namespace ddp::test
