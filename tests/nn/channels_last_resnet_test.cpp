// Channels-last end to end: a ResNet given an NHWC input keeps every
// convolution's and max pool's input and output, and their gradients, NHWC
// through the forward and the backward, with no layout conversion after the
// input in conv2d, batch_norm or max_pool2d (Note [Memory-format
// propagation], Note [Layout conversion count]).

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "ddp/autograd/engine.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/layout_conversions.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/tensor/ops.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;
using nn::models::BasicBlock;
using nn::models::Bottleneck;
using nn::models::ResNet;

// Every convolution's (and the stem's max pool's) input and output, in
// forward order, with a name.
struct ConvTrace {
  Tensors tensors;
  std::vector<std::string> names;
};

Tensor traced_conv(nn::Conv2d& conv, const Tensor& x, const std::string& name, ConvTrace& t) {
  Tensor y = conv.forward(x);
  t.tensors.insert(t.tensors.end(), {x, y});
  t.names.insert(t.names.end(), {name + " input", name + " output"});
  return y;
}

Tensor shortcut(const std::shared_ptr<nn::Sequential>& downsample, const Tensor& x,
                const std::string& name, ConvTrace& t) {
  if (!downsample) return x;
  Tensor s = traced_conv(*downsample->at<nn::Conv2d>(0), x, name + ".downsample.0", t);
  return downsample->at<nn::BatchNorm2d>(1)->forward(s);
}

// The blocks' and the model's forward (resnet.cpp), one module call at a
// time so that the convolutions' tensors can be looked at.
Tensor traced_block(const std::shared_ptr<nn::UnaryModule>& block, const Tensor& x,
                    const std::string& name, ConvTrace& t) {
  if (auto b = std::dynamic_pointer_cast<BasicBlock>(block)) {
    Tensor y = relu(b->bn1->forward(traced_conv(*b->conv1, x, name + ".conv1", t)));
    y = b->bn2->forward(traced_conv(*b->conv2, y, name + ".conv2", t));
    return relu(add(y, shortcut(b->downsample, x, name, t)));
  }
  auto b = std::dynamic_pointer_cast<Bottleneck>(block);
  EXPECT_NE(b, nullptr);
  Tensor y = relu(b->bn1->forward(traced_conv(*b->conv1, x, name + ".conv1", t)));
  y = relu(b->bn2->forward(traced_conv(*b->conv2, y, name + ".conv2", t)));
  y = b->bn3->forward(traced_conv(*b->conv3, y, name + ".conv3", t));
  return relu(add(y, shortcut(b->downsample, x, name, t)));
}

Tensor traced_forward(ResNet& model, const Tensor& x, ConvTrace& t) {
  Tensor y = relu(model.bn1->forward(traced_conv(*model.conv1, x, "conv1", t)));
  if (model.maxpool) {  // resnet50's stem: its input and output are traced too
    Tensor pooled = model.maxpool->forward(y);
    t.tensors.insert(t.tensors.end(), {y, pooled});
    t.names.insert(t.names.end(), {"maxpool input", "maxpool output"});
    y = pooled;
  }
  for (size_t s = 0; s < model.layers.size(); ++s)
    for (size_t i = 0; i < model.layers[s]->size(); ++i)
      y = traced_block((*model.layers[s])[i], y,
                       "layer" + std::to_string(s + 1) + "." + std::to_string(i), t);
  y = model.avgpool->forward(y).flatten(1);
  return model.fc->forward(y);
}

Tensor labels(int64_t n, int64_t classes) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i % classes);
  return Tensor::from_vector(v, {n});
}

void expect_channels_last_end_to_end(ResNet& model, const Shape& input_shape) {
  Generator gen(7);
  Tensor x = F::to_channels_last(randn(input_shape, {}, &gen));
  x.set_requires_grad(true);
  ASSERT_TRUE(F::is_channels_last(x));
  const Tensor target = labels(input_shape[0], 10);

  // Every convolution's and max pool's input and output, and their
  // gradients, are NHWC.
  ConvTrace trace;
  Tensor loss = F::cross_entropy(traced_forward(model, x, trace), target);
  Tensors grads = autograd::grad({loss}, trace.tensors, {});
  ASSERT_EQ(grads.size(), trace.tensors.size());
  for (size_t i = 0; i < trace.tensors.size(); ++i) {
    SCOPED_TRACE(trace.names[i]);
    EXPECT_TRUE(F::is_channels_last(trace.tensors[i]))
        << "strides " << shape_str(trace.tensors[i].strides());
    ASSERT_TRUE(grads[i].defined());
    EXPECT_TRUE(F::is_channels_last(grads[i]))
        << "gradient strides " << shape_str(grads[i].strides());
  }

  // The model's own forward and backward convert nothing after the input.
  const int64_t before = F::layout_conversion_count();
  Tensor logits = model.forward(x);
  F::cross_entropy(logits, target).backward();
  EXPECT_EQ(F::layout_conversion_count() - before, 0);
  EXPECT_TRUE(F::is_channels_last(x.grad()));
  // Evaluation mode too (BatchNorm with the running statistics).
  model.eval();
  const int64_t before_eval = F::layout_conversion_count();
  {
    autograd::NoGradGuard no_grad;
    model.forward(x);
  }
  EXPECT_EQ(F::layout_conversion_count() - before_eval, 0);
}

TEST(ChannelsLastResNet, Resnet20KeepsNhwcForwardAndBackward) {
  manual_seed(1);
  auto model = nn::models::resnet20({3, 10});
  expect_channels_last_end_to_end(*model, {2, 3, 32, 32});
}

// resnet50's shape (imagenet stem with max pool, bottlenecks with
// projection shortcuts, four stages) at a small width and one block per stage.
TEST(ChannelsLastResNet, BottleneckStackKeepsNhwcForwardAndBackward) {
  manual_seed(2);
  ResNet model(ResNet::Block::bottleneck, {1, 2, 1, 1}, ResNet::Stem::imagenet, 8, {3, 10});
  expect_channels_last_end_to_end(model, {2, 3, 64, 64});
}

// The imagenet stem's max pool on its own: NHWC in, NHWC out, both ways,
// and not one conversion (a converting max_pool2d is counted, Note [Layout
// conversion count], so this and the end-to-end counts above would fail).
TEST(ChannelsLastResNet, StemMaxPoolConvertsNothing) {
  manual_seed(4);
  ResNet model(ResNet::Block::bottleneck, {1, 1, 1, 1}, ResNet::Stem::imagenet, 8, {3, 10});
  ASSERT_NE(model.maxpool, nullptr);
  Generator gen(9);
  Tensor x = F::to_channels_last(randn({2, 8, 16, 16}, {}, &gen)).set_requires_grad();
  const int64_t before = F::layout_conversion_count();
  Tensor y = model.maxpool->forward(x);
  EXPECT_TRUE(F::is_channels_last(y)) << "strides " << shape_str(y.strides());
  y.backward(F::to_channels_last(randn(y.shape(), {}, &gen)));
  EXPECT_EQ(F::layout_conversion_count() - before, 0);
  EXPECT_TRUE(F::is_channels_last(x.grad())) << "strides " << shape_str(x.grad().strides());
}

// An NCHW model counts its conversions: the counter can see them.
TEST(ChannelsLastResNet, NchwInputIsCountedAsConversions) {
  manual_seed(3);
  auto model = nn::models::resnet20({3, 10});
  Generator gen(8);
  Tensor x = randn({2, 3, 32, 32}, {}, &gen);
  const int64_t before = F::layout_conversion_count();
  F::cross_entropy(model->forward(x), labels(2, 10)).backward();
  EXPECT_GT(F::layout_conversion_count() - before, 0);
}

}  // namespace
}  // namespace ddp::test
