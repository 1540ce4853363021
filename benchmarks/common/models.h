#pragma once
// The models the benchmarks time, by name; their synthetic batches; and the
// FLOPs a training step of one sample costs (docs/benchmarks.md).
//
//   auto net = bench::make_resnet("resnet50");
//   double flops = bench::resnet_train_flops(*net, 224);   // ≈ 24.5e9 per image
//   auto c = bench::gpt_config("gpt-tiny", 64);
//   double per_token = bench::gpt_train_flops_per_token(n_params, c, 64);
//
// Note [Benchmark FLOPs]
// Model FLOPs, not hardware FLOPs: what the model needs, whatever the kernels
// do (recomputation, padding, im2col), so MFU compares implementations fairly.
//   ResNet: the multiply-accumulates (MACs) of every convolution and of the
//     classifier, counted from the model's own layers at the given image size,
//     times 2 FLOPs per MAC, times 3 for training (backward computes the
//     input gradient and the weight gradient, each as costly as the forward).
//     BatchNorm, ReLU, pooling and the residual adds are left out: they are
//     elementwise, about 1 % of the total for resnet50, and bound by memory.
//     For resnet50 at 224² this gives 4.089 GMAC -> 8.18 GFLOP forward ->
//     24.5 GFLOP per trained image, the figure usually quoted (torchvision
//     lists 4.09 "GFLOPS", i.e. GMACs, for resnet50).
//   GPT: llm.c's estimate (train_gpt2.cu, gpt2_estimate_mfu, after Kaplan et
//     al. 2020 §2.1): 6·N + 6·L·C·T per token, where N counts every parameter
//     (the tied token embedding, which also serves as the LM head, the
//     position embedding, biases and LayerNorms), L the layers, C the width
//     and T the sequence length. 6·N is the weight matmuls (2 forward + 4
//     backward per parameter); 6·L·C·T the attention scores and their
//     weighted sum under the causal mask (PaLM's 12·L·C·T counts the masked
//     half as well).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/core/device.h"
#include "ddp/nn/models/gpt.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/tensor/tensor.h"

namespace bench {

// The names each family knows, in the order usage texts list them.
const std::vector<std::string>& resnet_names();
const std::vector<std::string>& gpt_names();
bool is_resnet(const std::string& name);
bool is_gpt(const std::string& name);
// "a, b or c", for messages and usage texts.
std::string join_names(const std::vector<std::string>& names);

// ---- ResNet ----------------------------------------------------------------
// 32 for the CIFAR ResNets (resnet20/32/56), 224 for the ImageNet ones.
int64_t default_image_size(const std::string& resnet);
int64_t num_classes(const std::string& resnet);  // 10 or 1000
// Built from the current global seed, on the CPU; ValueError for a name
// resnet_names() lacks.
std::shared_ptr<ddp::nn::models::ResNet> make_resnet(const std::string& name);
// Forward MACs of one image of side `image_size` (Note [Benchmark FLOPs]);
// ValueError when the image is too small for the model's downsampling.
int64_t resnet_forward_macs(const ddp::nn::models::ResNet& model, int64_t image_size);
// 2 · 3 · resnet_forward_macs: training FLOPs per image.
double resnet_train_flops(const ddp::nn::models::ResNet& model, int64_t image_size);

// ---- GPT -------------------------------------------------------------------
// 64 for gpt-tiny, 1024 for the GPT-2 sizes.
int64_t default_seq_len(const std::string& gpt);
// The model's configuration; its context (block_size) is stretched to
// seq_len when that is longer. ValueError for an unknown name.
ddp::nn::models::GPTConfig gpt_config(const std::string& name, int64_t seq_len);
// The parameters GPT(c) has, from its shapes (Note [GPT-2 architecture]:
// the LM head is tied to wte), without building it; bench_gpt checks it
// against the model it builds.
int64_t gpt_num_params(const ddp::nn::models::GPTConfig& c);
// 6·N + 6·L·C·T (Note [Benchmark FLOPs]).
double gpt_train_flops_per_token(int64_t num_params, const ddp::nn::models::GPTConfig& c,
                                 int64_t seq_len);

// ---- synthetic batches -----------------------------------------------------
// Made once, before timing, on `device`, from a fixed seed: the benchmarks
// measure the model, never a data loader.
struct Batch {
  ddp::Tensor x, y;
};
// x: f32 [n, 3, side, side] normal noise; y: i64 [n] classes in [0, classes).
Batch synthetic_images(int64_t n, int64_t side, int64_t classes, const ddp::Device& device,
                       uint64_t seed);
// x, y: i64 [n, seq_len] tokens in [0, vocab).
Batch synthetic_tokens(int64_t n, int64_t seq_len, int64_t vocab, const ddp::Device& device,
                       uint64_t seed);

}  // namespace bench
