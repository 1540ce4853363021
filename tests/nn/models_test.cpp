// ResNet and GPT: parameter counts, PyTorch names, shapes, and the errors for
// a wrong input shape. (Numerical equality with PyTorch:
// models_golden_test.cpp.)

#include <gtest/gtest.h>

#include "ddp/nn/models/gpt.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/tensor/ops.h"

using namespace ddp;
using namespace ddp::nn::models;

namespace {

bool has_key(const nn::TensorDict& d, const std::string& k) { return d.contains(k); }

// torchvision's counts (torchvision.models.resnetNN().parameters()).
TEST(ResNet, ImageNetParameterCounts) {
  EXPECT_EQ(resnet18()->num_parameters(), 11'689'512);
  EXPECT_EQ(resnet34()->num_parameters(), 21'797'672);
  EXPECT_EQ(resnet50()->num_parameters(), 25'557'032);
  EXPECT_EQ(resnet101()->num_parameters(), 44'549'160);
}

TEST(ResNet, CifarParameterCounts) {
  // 1 input channel, 10 classes: the count the issue names.
  EXPECT_EQ(resnet20({1, 10})->num_parameters(), 272'186);
  // 3 channels: the stem gains 2·16·9 = 288 weights.
  EXPECT_EQ(resnet20()->num_parameters(), 272'474);
}

TEST(ResNet, NamesAreTorchvisions) {
  auto sd = resnet50()->state_dict();
  for (const char* k : {"conv1.weight", "bn1.weight", "bn1.running_mean", "bn1.num_batches_tracked",
                        "layer1.0.conv1.weight", "layer1.0.downsample.0.weight",
                        "layer1.0.downsample.1.running_var", "layer3.2.conv2.weight",
                        "layer4.2.bn3.bias", "fc.weight", "fc.bias"})
    EXPECT_TRUE(has_key(sd, k)) << k;
  // v1.5: the stride of a downsampling bottleneck is on its 3×3 convolution.
  auto m = resnet50();
  auto block = m->layers[1]->at<Bottleneck>(0);
  EXPECT_EQ(block->conv2->params().stride, nn::Int2(2));
  EXPECT_EQ(block->conv1->params().stride, nn::Int2(1));
}

TEST(ResNet, ForwardShapesAndWrongInput) {
  auto m = resnet20({1, 10});
  m->eval();
  Tensor y = m->forward(randn({2, 1, 32, 32}));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
  try {
    m->forward(randn({2, 3, 32, 32}));  // 3 channels into a 1-channel stem
    FAIL() << "accepted 3 channels";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("conv1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m->forward(randn({1, 32, 32})), ShapeError);  // rank 3
}

TEST(GPT, Gpt2SmallParameterCount) {
  auto m = gpt2_124m();
  EXPECT_EQ(m->num_parameters(), 124'439'808);
}

GPTConfig tiny() {
  GPTConfig c;
  c.vocab_size = 37;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

TEST(GPT, NamesShapesAndTiedHead) {
  auto m = std::make_shared<GPT>(tiny());
  auto sd = m->state_dict();
  for (const char* k : {"transformer.wte.weight", "transformer.wpe.weight",
                        "transformer.h.0.ln_1.weight", "transformer.h.0.attn.c_attn.weight",
                        "transformer.h.0.attn.c_attn.bias", "transformer.h.1.attn.c_proj.weight",
                        "transformer.h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_proj.bias",
                        "transformer.ln_f.weight", "transformer.ln_f.bias"})
    EXPECT_TRUE(has_key(sd, k)) << k;
  Tensor tokens = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor logits = m->forward(tokens);
  EXPECT_EQ(logits.shape(), (Shape{2, 3, 37}));
  // The head has no weight of its own: a gradient reaches wte through it.
  sum(logits).backward();
  ASSERT_TRUE(m->wte->weight.grad().defined());
}

TEST(GPT, TooLongASequenceNamesTheModule) {
  auto m = std::make_shared<GPT>(tiny());
  try {
    m->forward(Tensor::zeros({1, 9}, TensorOptions(DType::i64)));
    FAIL() << "accepted 9 tokens with a context of 8";
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("GPT"), std::string::npos) << msg;
    EXPECT_NE(msg.find("context 8"), std::string::npos) << msg;
  }
  EXPECT_THROW(m->forward(Tensor::zeros({9}, TensorOptions(DType::i64))), ShapeError);
  GPTConfig bad = tiny();
  bad.n_head = 3;  // 16 is not a multiple of 3
  EXPECT_THROW(GPT{bad}, ValueError);
}

}  // namespace
