#pragma once
// What both of train_gpt's loops use: the model's configuration and its
// Hugging Face initialisation, the corpus, the loss, the optimizer and its
// schedule, validation and sampling (main.cpp: plain DDP;
// fault_tolerant.cpp: DDP on an ElasticGroup).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ddp/data/data.h"
#include "ddp/dist/init.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/models/gpt.h"
#include "ddp/optim/adamw.h"
#include "ddp/optim/lr_scheduler.h"
#include "train_gpt/options.h"

namespace train_gpt {

// The configuration of --model and the size flags; exits 2 (naming the
// flags) when --n-embd is not divisible by --n-head.
ddp::nn::models::GPTConfig make_config(const Options& o);

// --init-from-hf: loads the weights into `model` and, for GPT-2's
// vocabulary, maps the byte tokens (Note [Bytes as GPT-2 tokens]); `lead`
// prints what it did. Nothing without the flag.
void init_from_hf(ddp::nn::models::GPT& model, const Options& o, bool lead);

// The training windows (block_size tokens, --stride apart) and the
// non-overlapping validation windows of --data, and a description of the
// corpus for the banner.
struct Corpus {
  ddp::data::DatasetPtr train, val;
  std::string description;
};
Corpus load_corpus(const Options& o, const ddp::nn::models::GPTConfig& config);

std::optional<ddp::DType> amp_dtype(const std::string& amp);

// Next-token loss over the logits [B, T, V] of a batch: the mean over its
// tokens, their sum, or (Reduction::none) one loss per token, [B * T].
ddp::Tensor lm_loss(
    const ddp::Tensor& logits, const ddp::Tensor& targets,
    ddp::nn::functional::Reduction reduction = ddp::nn::functional::Reduction::mean);

// The recipe: AdamW (weight decay on matrices only) and warmup + cosine
// over --steps steps down to --min-lr, the warmup from --warmup-steps or
// else 10% of the run. The scheduler holds the optimizer, hence the
// pointers.
struct Recipe {
  int64_t schedule_steps = 0, warmup = 0;
  std::unique_ptr<ddp::optim::AdamW> opt;
  std::unique_ptr<ddp::optim::WarmupCosineLR> sched;
};
Recipe make_recipe(const ddp::nn::Module& model, const Options& o);

// Validation loss per token over the first --val-batches batches of
// local_batch windows per rank (all windows for 0), sharded over the ranks
// of `world` without shuffling (a collective).
double validate(ddp::nn::models::GPT& model, const ddp::data::DatasetPtr& val, const Options& o,
                int64_t local_batch, ddp::dist::World& world);
// The same windows as validate() over `ranks` ranks, on this process alone
// (no communication).
double validate_locally(ddp::nn::models::GPT& model, const ddp::data::DatasetPtr& val,
                        const Options& o, int64_t local_batch, int ranks,
                        const ddp::Device& device);

// Prints --sample bytes generated from --prompt (Note [Sampling from a
// GPT]); returns how many.
int64_t print_sample(ddp::nn::models::GPT& model, const Options& o);

// train_gpt --fault-tolerant (docs/fault_tolerance.md).
int run_fault_tolerant(const Options& o);

}  // namespace train_gpt
