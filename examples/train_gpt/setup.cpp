// train_gpt's model, corpus, recipe, validation and sampling (setup.h).

#include "train_gpt/setup.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/trainer_util.h"
#include "ddp/amp/autocast.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/io/hf_gpt2.h"
#include "ddp/tensor/ops.h"

namespace train_gpt {

using namespace ddp;
namespace F = ddp::nn::functional;

nn::models::GPTConfig make_config(const Options& o) {
  nn::models::GPTConfig c;  // GPT-2 124M
  c.vocab_size = data::TextCorpus::kVocabSize;
  if (o.model == "gpt-tiny") {
    c.block_size = 128, c.n_layer = 4, c.n_head = 4, c.n_embd = 128;
  } else if (o.model == "gpt-mini") {
    c.block_size = 256, c.n_layer = 6, c.n_head = 6, c.n_embd = 384;
  } else if (o.model == "gpt2-124m") {
    c.vocab_size = 50257;  // GPT-2's own size; the byte tokens use the first 256 rows
  }
  if (o.n_layer > 0) c.n_layer = o.n_layer;
  if (o.n_head > 0) c.n_head = o.n_head;
  if (o.n_embd > 0) c.n_embd = o.n_embd;
  if (o.block_size > 0) c.block_size = o.block_size;
  c.dropout = o.dropout;
  if (c.n_embd % c.n_head != 0) {
    std::fprintf(stderr, "train_gpt: --n-embd %lld is not divisible by --n-head %lld\n",
                 (long long)c.n_embd, (long long)c.n_head);
    std::exit(2);
  }
  return c;
}

namespace {

// Note [Bytes as GPT-2 tokens]
// GPT-2's byte-level BPE gives each of the 256 bytes a token id below 256,
// but not id = byte: printable bytes come first ('!' is 0, 'A' is 32), the
// rest after (' ' is 220, '\n' is 198), in the order of its
// bytes_to_unicode table. After loading Hugging Face weights into a model
// with GPT-2's vocabulary, rows 0..255 of the (tied) embedding are
// reordered so that our token b, the byte b, reads GPT-2's token for b: the
// pretrained model then sees text it knows, and its logits 0..255 are
// bytes. Returns whether it did (only for a 50257-token vocabulary).
bool map_bytes_to_gpt2_tokens(nn::models::GPT& model) {
  if (model.config().vocab_size != 50257) return false;
  std::vector<int64_t> gpt2_order;  // GPT-2 id -> byte
  for (int b = 33; b <= 126; ++b) gpt2_order.push_back(b);
  for (int b = 161; b <= 172; ++b) gpt2_order.push_back(b);
  for (int b = 174; b <= 255; ++b) gpt2_order.push_back(b);
  for (int b = 0; b < 256; ++b)
    if (std::find(gpt2_order.begin(), gpt2_order.end(), b) == gpt2_order.end())
      gpt2_order.push_back(b);
  std::vector<int64_t> id_of_byte(256);
  for (int64_t id = 0; id < 256; ++id) id_of_byte[size_t(gpt2_order[size_t(id)])] = id;
  NoGradGuard no_grad;
  Tensor rows = model.wte->weight.narrow(0, 0, 256);
  Tensor index = Tensor::from_vector(id_of_byte, {256}).to(rows.device());
  rows.copy_(index_select(rows, 0, index));
  return true;
}

}  // namespace

void init_from_hf(nn::models::GPT& model, const Options& o, bool lead) {
  if (o.init_from_hf.empty()) return;
  io::load_hf_gpt2(model, o.init_from_hf);  // every rank; DDP checks they agree
  const bool byte_rows = map_bytes_to_gpt2_tokens(model);
  if (lead)
    std::printf("initialised from Hugging Face GPT-2 weights %s%s\n", o.init_from_hf.c_str(),
                byte_rows ? " (byte b reads GPT-2's byte token for b)" : "");
}

Corpus load_corpus(const Options& o, const nn::models::GPTConfig& config) {
  const int64_t T = config.block_size;
  Corpus c;
  if (o.data == "text") {
    auto corpus = data::TextCorpus::load(o.data_dir);
    c.train = corpus->windows(data::Split::train, T, o.stride);
    c.val = corpus->windows(data::Split::test, T);
    c.description = o.data_dir + " (" + std::to_string(corpus->size()) + " bytes, " +
                    std::to_string(corpus->files().size()) + " files)";
  } else {
    c.train = std::make_shared<data::SyntheticTokenDataset>(100000, T, config.vocab_size,
                                                            uint64_t(o.seed));
    c.val = std::make_shared<data::SyntheticTokenDataset>(1000, T, config.vocab_size,
                                                          uint64_t(o.seed) + 1);
    c.description = "synthetic tokens";
  }
  return c;
}

std::optional<DType> amp_dtype(const std::string& amp) {
  if (amp == "bf16") return DType::bf16;
  if (amp == "f16") return DType::f16;
  return std::nullopt;
}

Tensor lm_loss(const Tensor& logits, const Tensor& targets, F::Reduction reduction) {
  const int64_t v = logits.size(-1);
  return F::cross_entropy(logits.reshape({-1, v}), targets.reshape({-1}), reduction);
}

Recipe make_recipe(const nn::Module& model, const Options& o) {
  Recipe r;
  r.schedule_steps = o.steps;
  r.warmup =
      o.warmup_steps >= 0 ? std::min(o.warmup_steps, r.schedule_steps) : r.schedule_steps / 10;
  r.opt = std::make_unique<optim::AdamW>(
      examples::decay_groups(model), o.lr,
      optim::AdamWOptions{.betas = {o.beta1, o.beta2}, .weight_decay = o.weight_decay});
  r.sched = std::make_unique<optim::WarmupCosineLR>(
      *r.opt, r.schedule_steps,
      optim::WarmupCosineOptions{.warmup_steps = r.warmup,
                                 .min_lr = o.min_lr >= 0 ? o.min_lr : o.lr / 10});
  return r;
}

namespace {

// The windows both validations read: the first --val-batches batches of
// local_batch windows of each of `ranks` ranks.
int64_t validation_windows(const data::Dataset& val, const Options& o, int64_t local_batch,
                           int ranks) {
  int64_t n = val.size();
  if (o.val_batches > 0) n = std::min(n, o.val_batches * local_batch * ranks);
  return n;
}

}  // namespace

// Sharded: padding positions of the sampler (>= n) are not counted.
double validate(nn::models::GPT& model, const data::DatasetPtr& val, const Options& o,
                int64_t local_batch, dist::World& world) {
  const int world_size = world.size(), rank = world.rank();
  const int64_t n = validation_windows(*val, o, local_batch, world_size);
  auto sampler = std::make_shared<data::DistributedSampler>(n, world_size, rank, false);
  data::DataLoader loader(
      val, {.batch_size = local_batch, .num_workers = int(o.workers), .device = world.device},
      sampler);
  model.eval();
  double loss_sum = 0, tokens = 0;
  int64_t position = 0;
  {
    NoGradGuard no_grad;
    for (const data::Batch& b : loader) {
      int64_t keep = 0;
      while (keep < b.size() && rank + (position + keep) * world_size < n) ++keep;
      position += b.size();
      if (keep == 0) continue;
      std::optional<amp::Autocast> autocast;
      if (auto dt = amp_dtype(o.amp)) autocast.emplace(world.device, *dt);
      Tensor x = b.input.narrow(0, 0, keep), y = b.target.narrow(0, 0, keep);
      loss_sum += lm_loss(model.forward(x).to(kFloat32), y, F::Reduction::sum).item<float>();
      tokens += double(y.numel());
    }
  }
  model.train();
  auto sums = examples::allreduce_sum(world, {loss_sum, tokens});
  return sums[0] / std::max(1.0, sums[1]);
}

double validate_locally(nn::models::GPT& model, const data::DatasetPtr& val, const Options& o,
                        int64_t local_batch, int ranks, const Device& device) {
  const int64_t n = validation_windows(*val, o, local_batch, ranks);
  data::DataLoader loader(val, {.batch_size = local_batch, .num_workers = 0, .device = device},
                          std::make_shared<data::SequentialSampler>(n));
  model.eval();
  double loss_sum = 0, tokens = 0;
  {
    NoGradGuard no_grad;
    for (const data::Batch& b : loader) {
      loss_sum +=
          lm_loss(model.forward(b.input).to(kFloat32), b.target, F::Reduction::sum).item<float>();
      tokens += double(b.target.numel());
    }
  }
  model.train();
  return loss_sum / std::max(1.0, tokens);
}

int64_t print_sample(nn::models::GPT& model, const Options& o) {
  std::vector<int64_t> prompt;
  for (unsigned char c : o.prompt) prompt.push_back(c);
  const std::vector<int64_t> bytes =
      nn::models::generate(model, prompt, o.sample,
                           {.temperature = o.temperature,
                            .top_k = o.top_k,
                            .vocab_limit = data::TextCorpus::kVocabSize,
                            .seed = uint64_t(o.seed)});
  std::string text;
  for (int64_t b : bytes) text.push_back(char(b));
  std::printf("sample (%lld bytes, temperature %g, top-k %s, seed %lld):\n%s%s\n",
              (long long)bytes.size(), o.temperature,
              o.top_k > 0 ? std::to_string(o.top_k).c_str() : "all", (long long)o.seed,
              o.prompt.c_str(), text.c_str());
  std::fflush(stdout);
  return int64_t(bytes.size());
}

}  // namespace train_gpt
