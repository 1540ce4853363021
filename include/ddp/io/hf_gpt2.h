#pragma once
// Hugging Face GPT-2 checkpoints (model.safetensors) in and out of a
// ddp::nn::models::GPT.
//
//   auto model = std::make_shared<nn::models::GPT>(config);
//   io::load_hf_gpt2(*model, "gpt2/model.safetensors");
//
// Note [Hugging Face GPT-2 checkpoints]
// load_hf_gpt2 reads a Hugging Face GPT-2 `model.safetensors` as it is:
// HF's names with or without the "transformer." prefix (GPT2LMHeadModel /
// GPT2Model), the Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc,
// mlp.c_proj) stored transposed as [in, out] and turned into our Linear's
// [out, in], lm_head.weight absent or equal to wte (tied), and the
// attn.bias / attn.masked_bias mask buffers ignored. Every tensor is
// checked before any is copied, in the model's order, so a wrong config
// raises ShapeError naming the first mismatched tensor with both shapes,
// and a missing or unexpected tensor raises ValueError naming it; a
// truncated or corrupt file is refused by the safetensors reader (IoError
// naming the file). Values are converted to the model's dtype and device.
// save_hf_gpt2 writes the inverse: "transformer."-prefixed names, Conv1D
// weights transposed back, no lm_head (HF ties it), metadata format=pt as
// transformers' loader requires. They live in io, not beside GPT in nn:
// io sits below nn and may use its models, while nn reads and writes no
// file (Note [Layering of io]).

#include <string>

#include "ddp/nn/models/gpt.h"

namespace ddp::io {

void load_hf_gpt2(nn::models::GPT& model, const std::string& path);
void save_hf_gpt2(const nn::models::GPT& model, const std::string& path);

}  // namespace ddp::io
