#pragma once
// ResNets, with PyTorch's names so that torchvision weights load by name
// (state_dict / safetensors): "conv1.weight", "layer1.0.conv1.weight",
// "layer2.0.downsample.1.running_mean", "fc.bias".
//
//   auto model = ddp::nn::models::resnet50();            // 25,557,032 parameters
//   auto small = ddp::nn::models::resnet20({.in_channels = 1, .num_classes = 10});
//   Tensor logits = model->forward(images);              // [N, 3, 224, 224] -> [N, 1000]
//
// Note [ResNet variants]
// resnet18/34/50/101 follow torchvision's v1.5 ResNet for ImageNet: a 7×7/2
// stem and a 3×3/2 max pool, four stages of 64/128/256/512 planes, basic
// blocks (18, 34) or bottlenecks with expansion 4 (50, 101) whose stride sits
// on the 3×3 convolution (v1.5; v1 put it on the first 1×1), and a 1×1
// convolution + BatchNorm shortcut where the shape changes. resnet20/32/56
// are He et al. 2016 §4.2 for 32×32 images: a 3×3 stem, three stages of
// 16/32/64 planes with n = (depth − 2) / 6 basic blocks each, and projection
// shortcuts (1×1 convolution + BatchNorm, option B) where the shape changes.
// Initialisation is torchvision's: convolutions kaiming_normal_(fan_out,
// relu), BatchNorm weight 1 and bias 0, fc like nn::Linear.

#include <memory>
#include <vector>

#include "ddp/nn/batch_norm.h"
#include "ddp/nn/container.h"
#include "ddp/nn/conv.h"
#include "ddp/nn/linear.h"
#include "ddp/nn/pooling.h"

namespace ddp::nn::models {

struct ResNetOptions {
  int64_t in_channels = 3;
  int64_t num_classes = 1000;
};

// conv3x3 - bn - relu - conv3x3 - bn, plus the shortcut, then relu.
class BasicBlock : public UnaryModule {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<Sequential> downsample;  // null when the shape is kept
};

// conv1x1 - bn - relu - conv3x3(stride) - bn - relu - conv1x1 - bn, plus the
// shortcut, then relu (Note [ResNet variants]: the stride on the 3×3).
class Bottleneck : public UnaryModule {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<Sequential> downsample;
};

class ResNet : public UnaryModule {
 public:
  enum class Block { basic, bottleneck };
  enum class Stem { imagenet, cifar };  // 7×7/2 + max pool, or 3×3/1
  // blocks_per_stage: how many blocks in each stage (4 stages for imagenet,
  // 3 for cifar); planes doubles from stage to stage.
  ResNet(Block block, std::vector<int64_t> blocks_per_stage, Stem stem, int64_t base_planes,
         ResNetOptions options);
  // x: [N, in_channels, H, W] -> logits [N, num_classes].
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<MaxPool2d> maxpool;  // null for the cifar stem
  std::vector<std::shared_ptr<Sequential>> layers;  // layer1, layer2, ...
  std::shared_ptr<AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<Linear> fc;
};

std::shared_ptr<ResNet> resnet18(ResNetOptions options = {});
std::shared_ptr<ResNet> resnet34(ResNetOptions options = {});
std::shared_ptr<ResNet> resnet50(ResNetOptions options = {});
std::shared_ptr<ResNet> resnet101(ResNetOptions options = {});
// For 32×32 inputs; num_classes defaults to 10 here.
std::shared_ptr<ResNet> resnet20(ResNetOptions options = {3, 10});
std::shared_ptr<ResNet> resnet32(ResNetOptions options = {3, 10});
std::shared_ptr<ResNet> resnet56(ResNetOptions options = {3, 10});

}  // namespace ddp::nn::models
