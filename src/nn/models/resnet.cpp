// See Note [ResNet variants] in include/ddp/nn/models/resnet.h.

#include "ddp/nn/models/resnet.h"

#include "ddp/core/error.h"
#include "ddp/nn/activation.h"
#include "ddp/nn/init.h"
#include "ddp/tensor/ops.h"

namespace ddp::nn::models {

namespace {

std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  return std::make_shared<Conv2d>(in, out, k, stride, /*padding=*/k / 2, /*dilation=*/1,
                                  /*groups=*/1, /*bias=*/false);
}

// The projection shortcut: 1×1 convolution with the block's stride + BatchNorm.
std::shared_ptr<Sequential> projection(int64_t in, int64_t out, int64_t stride) {
  auto s = std::make_shared<Sequential>();
  s->push_back(conv(in, out, 1, stride));
  s->push_back(std::make_shared<BatchNorm2d>(out));
  return s;
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride)
    : UnaryModule("BasicBlock") {
  conv1 = register_module("conv1", conv(in_planes, planes, 3, stride));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, 1));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  if (stride != 1 || in_planes != planes)
    downsample = register_module("downsample", projection(in_planes, planes, stride));
}

// Each branch ends in relu(bn(conv(x))) or relu(bn(conv(x)) + identity):
// BatchNorm2d::forward_add_relu, one fused op (Note [BatchNorm + add + ReLU
// fusion]).
Tensor BasicBlock::forward(const Tensor& x) {
  Tensor y = bn1->forward_add_relu((*conv1)(x));
  y = (*conv2)(y);
  // The shortcut runs before bn2, whose fused op adds it (named, so that
  // the order in which layers run, and their hooks, is fixed).
  const Tensor shortcut = downsample ? (*downsample)(x) : x;
  return bn2->forward_add_relu(y, shortcut);
}

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride)
    : UnaryModule("Bottleneck") {
  const int64_t out = planes * kExpansion;
  conv1 = register_module("conv1", conv(in_planes, planes, 1, 1));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, stride));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  conv3 = register_module("conv3", conv(planes, out, 1, 1));
  bn3 = register_module("bn3", std::make_shared<BatchNorm2d>(out));
  if (stride != 1 || in_planes != out)
    downsample = register_module("downsample", projection(in_planes, out, stride));
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor y = bn1->forward_add_relu((*conv1)(x));
  y = bn2->forward_add_relu((*conv2)(y));
  y = (*conv3)(y);
  const Tensor shortcut = downsample ? (*downsample)(x) : x;  // before bn3, as above
  return bn3->forward_add_relu(y, shortcut);
}

ResNet::ResNet(Block block, std::vector<int64_t> blocks_per_stage, Stem stem, int64_t base_planes,
               ResNetOptions options)
    : UnaryModule("ResNet") {
  DDP_CHECK(options.in_channels >= 1 && options.num_classes >= 1,
            "ResNet: in_channels ({}) and num_classes ({}) must be positive", options.in_channels,
            options.num_classes);
  const bool imagenet = stem == Stem::imagenet;
  conv1 = register_module("conv1", imagenet ? conv(options.in_channels, base_planes, 7, 2)
                                            : conv(options.in_channels, base_planes, 3, 1));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(base_planes));
  if (imagenet) maxpool = register_module("maxpool", std::make_shared<MaxPool2d>(3, 2, 1));
  const int64_t expansion =
      block == Block::basic ? BasicBlock::kExpansion : Bottleneck::kExpansion;
  int64_t in_planes = base_planes;
  for (size_t s = 0; s < blocks_per_stage.size(); ++s) {
    const int64_t planes = base_planes << s;
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < blocks_per_stage[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      if (block == Block::basic)
        stage->push_back(std::make_shared<BasicBlock>(in_planes, planes, stride));
      else
        stage->push_back(std::make_shared<Bottleneck>(in_planes, planes, stride));
      in_planes = planes * expansion;
    }
    layers.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  avgpool = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  fc = register_module("fc", std::make_shared<Linear>(in_planes, options.num_classes));

  // torchvision's initialisation (Note [ResNet variants]); BatchNorm2d
  // already starts at weight 1, bias 0.
  for (Module* m : modules())
    if (auto* c = dynamic_cast<Conv2d*>(m))
      init::kaiming_normal_(c->weight, 0.0, init::FanMode::fan_out, init::Nonlinearity::relu);
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor y = bn1->forward_add_relu((*conv1)(x));
  if (maxpool) y = (*maxpool)(y);
  for (auto& stage : layers) y = (*stage)(y);
  y = (*avgpool)(y).flatten(1);
  return (*fc)(y);
}

std::shared_ptr<ResNet> resnet18(ResNetOptions o) {
  return std::make_shared<ResNet>(ResNet::Block::basic, std::vector<int64_t>{2, 2, 2, 2},
                                  ResNet::Stem::imagenet, 64, o);
}
std::shared_ptr<ResNet> resnet34(ResNetOptions o) {
  return std::make_shared<ResNet>(ResNet::Block::basic, std::vector<int64_t>{3, 4, 6, 3},
                                  ResNet::Stem::imagenet, 64, o);
}
std::shared_ptr<ResNet> resnet50(ResNetOptions o) {
  return std::make_shared<ResNet>(ResNet::Block::bottleneck, std::vector<int64_t>{3, 4, 6, 3},
                                  ResNet::Stem::imagenet, 64, o);
}
std::shared_ptr<ResNet> resnet101(ResNetOptions o) {
  return std::make_shared<ResNet>(ResNet::Block::bottleneck, std::vector<int64_t>{3, 4, 23, 3},
                                  ResNet::Stem::imagenet, 64, o);
}

static std::shared_ptr<ResNet> cifar_resnet(int depth, ResNetOptions o) {
  const int64_t n = (depth - 2) / 6;
  return std::make_shared<ResNet>(ResNet::Block::basic, std::vector<int64_t>{n, n, n},
                                  ResNet::Stem::cifar, 16, o);
}
std::shared_ptr<ResNet> resnet20(ResNetOptions o) { return cifar_resnet(20, o); }
std::shared_ptr<ResNet> resnet32(ResNetOptions o) { return cifar_resnet(32, o); }
std::shared_ptr<ResNet> resnet56(ResNetOptions o) { return cifar_resnet(56, o); }

}  // namespace ddp::nn::models
