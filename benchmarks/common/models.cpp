#include "models.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "ddp/core/error.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"

namespace bench {

namespace models = ddp::nn::models;

namespace {

using ResNetFactory = std::function<std::shared_ptr<models::ResNet>()>;

// Name, factory, CIFAR-style (32×32 input, 10 classes).
struct ResNetEntry {
  const char* name;
  ResNetFactory make;
  bool cifar;
};
const std::vector<ResNetEntry>& resnet_table() {
  static const std::vector<ResNetEntry> table = {
      {"resnet18", [] { return models::resnet18(); }, false},
      {"resnet34", [] { return models::resnet34(); }, false},
      {"resnet50", [] { return models::resnet50(); }, false},
      {"resnet101", [] { return models::resnet101(); }, false},
      {"resnet20", [] { return models::resnet20(); }, true},
      {"resnet32", [] { return models::resnet32(); }, true},
      {"resnet56", [] { return models::resnet56(); }, true},
  };
  return table;
}

const ResNetEntry& resnet_entry(const std::string& name) {
  for (const ResNetEntry& e : resnet_table())
    if (name == e.name) return e;
  throw ddp::ValueError(
      fmt::format("unknown ResNet '{}' (known: {})", name, join_names(resnet_names())));
}

// GPT-2's sizes (Radford et al. 2019, Table 2) and a tiny one for CI.
// "gpt2" is the name bench_ddp has always used for the 124M model.
struct GPTEntry {
  const char* name;
  int64_t n_layer, n_head, n_embd, vocab_size, block_size;
};
constexpr GPTEntry kGPTs[] = {
    {"gpt-tiny", 2, 4, 128, 256, 64},         {"gpt2_124m", 12, 12, 768, 50257, 1024},
    {"gpt2", 12, 12, 768, 50257, 1024},       {"gpt2_350m", 24, 16, 1024, 50257, 1024},
    {"gpt2_774m", 36, 20, 1280, 50257, 1024}, {"gpt2_1558m", 48, 25, 1600, 50257, 1024},
};

const GPTEntry& gpt_entry(const std::string& name) {
  for (const GPTEntry& e : kGPTs)
    if (name == e.name) return e;
  throw ddp::ValueError(fmt::format("unknown GPT '{}' (known: {})", name, join_names(gpt_names())));
}

// A spatial size through one layer; ValueError when nothing is left of it,
// since the FLOPs of an image that the model cannot take mean nothing.
int64_t out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation,
                 const std::string& what) {
  const int64_t out =
      ddp::nn::functional::conv_output_size(in, kernel, stride, padding, dilation);
  if (out < 1)
    throw ddp::ValueError(
        fmt::format("the image is too small for this ResNet: {} of side {} leaves nothing", what, in));
  return out;
}

struct Spatial {
  int64_t h, w;
};

// MACs of one image through `conv`, and the output size.
int64_t conv_macs(const ddp::nn::Conv2d& conv, Spatial& s) {
  const auto& p = conv.params();
  const auto k = conv.kernel_size();
  s.h = out_size(s.h, k.h, p.stride.h, p.padding.h, p.dilation.h, conv.name());
  s.w = out_size(s.w, k.w, p.stride.w, p.padding.w, p.dilation.w, conv.name());
  return conv.out_channels() * (conv.in_channels() / p.groups) * k.h * k.w * s.h * s.w;
}

// A block's convolutions in order; the shortcut's 1×1 convolution sees the
// block's input, so it starts from the size the block started from.
template <class Block>
int64_t block_macs(const Block& b, const std::vector<const ddp::nn::Conv2d*>& main_path,
                   Spatial& s) {
  const Spatial in = s;
  int64_t macs = 0;
  for (const ddp::nn::Conv2d* c : main_path) macs += conv_macs(*c, s);
  if (b.downsample) {
    Spatial side = in;
    macs += conv_macs(*b.downsample->template at<ddp::nn::Conv2d>(0), side);
  }
  return macs;
}

}  // namespace

const std::vector<std::string>& resnet_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const ResNetEntry& e : resnet_table()) v.push_back(e.name);
    return v;
  }();
  return names;
}

const std::vector<std::string>& gpt_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const GPTEntry& e : kGPTs) v.push_back(e.name);
    return v;
  }();
  return names;
}

bool is_resnet(const std::string& name) {
  const auto& v = resnet_names();
  return std::find(v.begin(), v.end(), name) != v.end();
}

bool is_gpt(const std::string& name) {
  const auto& v = gpt_names();
  return std::find(v.begin(), v.end(), name) != v.end();
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

int64_t default_image_size(const std::string& resnet) {
  return resnet_entry(resnet).cifar ? 32 : 224;
}

int64_t num_classes(const std::string& resnet) { return resnet_entry(resnet).cifar ? 10 : 1000; }

std::shared_ptr<models::ResNet> make_resnet(const std::string& name) {
  return resnet_entry(name).make();
}

int64_t resnet_forward_macs(const models::ResNet& model, int64_t image_size) {
  Spatial s{image_size, image_size};
  int64_t macs = conv_macs(*model.conv1, s);
  if (model.maxpool) {
    // torchvision's stem pool, 3×3 / 2 with padding 1 (Note [ResNet
    // variants]); MaxPool2d keeps its geometry private.
    s.h = out_size(s.h, 3, 2, 1, 1, "maxpool");
    s.w = out_size(s.w, 3, 2, 1, 1, "maxpool");
  }
  for (const auto& stage : model.layers) {
    for (const auto& m : *stage) {
      if (auto b = std::dynamic_pointer_cast<models::Bottleneck>(m))
        macs += block_macs(*b, {b->conv1.get(), b->conv2.get(), b->conv3.get()}, s);
      else if (auto bb = std::dynamic_pointer_cast<models::BasicBlock>(m))
        macs += block_macs(*bb, {bb->conv1.get(), bb->conv2.get()}, s);
      else
        throw ddp::ValueError(fmt::format("resnet_forward_macs: unexpected block {}", m->name()));
    }
  }
  // Global average pooling leaves one feature vector per image.
  macs += model.fc->in_features() * model.fc->out_features();
  return macs;
}

double resnet_train_flops(const models::ResNet& model, int64_t image_size) {
  return 2.0 * 3.0 * double(resnet_forward_macs(model, image_size));
}

int64_t default_seq_len(const std::string& gpt) { return gpt_entry(gpt).block_size; }

models::GPTConfig gpt_config(const std::string& name, int64_t seq_len) {
  const GPTEntry& e = gpt_entry(name);
  models::GPTConfig c;
  c.n_layer = e.n_layer;
  c.n_head = e.n_head;
  c.n_embd = e.n_embd;
  c.vocab_size = e.vocab_size;
  c.block_size = std::max(e.block_size, seq_len);
  return c;
}

int64_t gpt_num_params(const models::GPTConfig& c) {
  const int64_t C = c.n_embd, b = c.bias ? 1 : 0;
  const int64_t layer_norm = C + b * C;
  const int64_t block = 2 * layer_norm                // ln_1, ln_2
                        + C * 3 * C + b * 3 * C       // attn.c_attn
                        + C * C + b * C               // attn.c_proj
                        + C * 4 * C + b * 4 * C       // mlp.c_fc
                        + 4 * C * C + b * C;          // mlp.c_proj
  return c.vocab_size * C + c.block_size * C + c.n_layer * block + layer_norm;
}

double gpt_train_flops_per_token(int64_t num_params, const models::GPTConfig& c, int64_t seq_len) {
  return 6.0 * double(num_params) + 6.0 * double(c.n_layer) * double(c.n_embd) * double(seq_len);
}

Batch synthetic_images(int64_t n, int64_t side, int64_t classes, const ddp::Device& device,
                       uint64_t seed) {
  ddp::Generator gen(seed);
  // Scaling by classes - 0.001 keeps the truncated class below `classes`.
  Batch b{ddp::randn({n, 3, side, side}, {}, &gen),
          ddp::mul(ddp::rand({n}, {}, &gen), double(classes) - 0.001).to(ddp::DType::i64)};
  return {b.x.to(device), b.y.to(device)};
}

Batch synthetic_tokens(int64_t n, int64_t seq_len, int64_t vocab, const ddp::Device& device,
                       uint64_t seed) {
  ddp::Generator gen(seed);
  auto tokens = [&] {
    return ddp::mul(ddp::rand({n, seq_len}, {}, &gen), double(vocab) - 0.001).to(ddp::DType::i64);
  };
  Batch b{tokens(), tokens()};
  return {b.x.to(device), b.y.to(device)};
}

}  // namespace bench
