// CPU-side tests of the convolution API around cuDNN's graph path: the
// fused conv2d_bias_relu (composed on the CPU: values, gradients, bad
// inputs), the TF32 switch (ddp/nn/cudnn.h, which exists in every build),
// and Module::to(MemoryFormat). The CUDA side is in conv_gpu_test.cpp.
#include <cstdlib>
#include <memory>

#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/conv.h"
#include "ddp/nn/cudnn.h"
#include "ddp/nn/functional/layout_conversions.h"
#include "nn/conv_golden_util.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;
using F::is_channels_last;
using F::to_channels_last;

TEST(ConvFusedTest, MatchesReluOfConvInF64) {
  manual_seed(1);
  Tensor x = randn({2, 4, 9, 8}), w = randn({6, 2, 3, 3}), b = randn({6});
  const F::Conv2dParams p{.stride = {1, 2}, .padding = 1, .groups = 2};
  Tensor want = relu(F::conv2d(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), p));
  Tensor want_nb = relu(F::conv2d(x.to(kFloat64), w.to(kFloat64), {}, p));
  for (bool cl : {false, true}) {
    SCOPED_TRACE(cl ? "nhwc" : "nchw");
    Tensor xin = cl ? to_channels_last(x) : x;
    const int64_t unfused = F::conv2d_bias_relu_unfused_count();
    Tensor y = F::conv2d_bias_relu(xin, w, b, p);
    EXPECT_EQ(F::conv2d_bias_relu_unfused_count(), unfused + 1);  // no fused CPU kernel
    EXPECT_EQ(is_channels_last(y), cl);
    EXPECT_REL_NEAR(y.to(kFloat64), want, 1e-5);
    EXPECT_REL_NEAR(F::conv2d_bias_relu(xin, w, {}, p).to(kFloat64), want_nb, 1e-5);
    EXPECT_GE(min(y).item<float>(), 0.0f);
    EXPECT_GT(max(y).item<float>(), 0.0f);  // not all clipped: the test sees the values
  }
}

TEST(ConvFusedTest, GradientsAreThoseOfTheComposition) {
  manual_seed(2);
  Tensor x = randn({2, 3, 6, 6}), w = randn({4, 3, 3, 3}), b = randn({4});
  auto grads = [&](bool fused) {
    Tensor xr = x.detach().set_requires_grad(), wr = w.detach().set_requires_grad(),
           br = b.detach().set_requires_grad();
    Tensor y = fused ? F::conv2d_bias_relu(xr, wr, br, {.padding = 1})
                     : relu(F::conv2d(xr, wr, br, {.padding = 1}));
    EXPECT_TRUE(y.requires_grad());
    sum(y * y).backward();
    return Tensors{xr.grad(), wr.grad(), br.grad()};
  };
  Tensors got = grads(true), want = grads(false);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(max_abs_error(got[i], want[i]), 0.0) << i;
  // Under NoGradGuard nothing is recorded.
  NoGradGuard no_grad;
  Tensor xr = x.detach().set_requires_grad();
  EXPECT_FALSE(F::conv2d_bias_relu(xr, w, b).requires_grad());
}

TEST(ConvFusedTest, RefusesBadInputsNamingTheOp) {
  Tensor x = randn({1, 4, 5, 5}), w = randn({2, 4, 3, 3});
  EXPECT_DDP_ERROR(F::conv2d_bias_relu(randn({4, 5, 5}), w), ShapeError,
                   "conv2d_bias_relu: expected a 4-D input");
  EXPECT_DDP_ERROR(F::conv2d_bias_relu(x, w, randn({3})), ShapeError,
                   "conv2d_bias_relu: expected a bias [2]");
  EXPECT_DDP_ERROR(F::conv2d_bias_relu(x, w, randn({2}).to(kFloat64)), DTypeError,
                   "share one floating dtype");
  EXPECT_DDP_ERROR(F::conv2d_bias_relu(x, w, {}, {.padding = -1}), ValueError,
                   "padding non-negative");
  nn::Conv2d conv(3, 2, 3);
  EXPECT_DDP_ERROR(conv.forward_relu(x), ShapeError, "expected an input [N, 3, H, W]");
}

TEST(ConvFusedTest, Conv2dForwardReluIsReluOfForward) {
  manual_seed(3);
  nn::Conv2d conv(3, 5, 3, 1, 1);
  Tensor x = randn({2, 3, 7, 7});
  NoGradGuard no_grad;
  EXPECT_EQ(max_abs_error(conv.forward_relu(x), relu(conv.forward(x))), 0.0);
}

// Restores DDP_CUDNN_ALLOW_TF32 and the flag after a test that changes them.
class Tf32EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* v = std::getenv("DDP_CUDNN_ALLOW_TF32")) saved_ = v, had_ = true;
    flag_ = nn::cudnn::allow_tf32();
  }
  void TearDown() override {
    if (had_)
      setenv("DDP_CUDNN_ALLOW_TF32", saved_.c_str(), 1);
    else
      unsetenv("DDP_CUDNN_ALLOW_TF32");
    nn::cudnn::set_allow_tf32(flag_);
  }
  std::string saved_;
  bool had_ = false, flag_ = true;
};

TEST_F(Tf32EnvTest, DefaultIsOnAndTheVariableSetsIt) {
  unsetenv("DDP_CUDNN_ALLOW_TF32");
  nn::cudnn::detail::reset_allow_tf32();
  EXPECT_TRUE(nn::cudnn::allow_tf32());  // like torch.backends.cudnn.allow_tf32
  setenv("DDP_CUDNN_ALLOW_TF32", "0", 1);
  nn::cudnn::detail::reset_allow_tf32();
  EXPECT_FALSE(nn::cudnn::allow_tf32());
  setenv("DDP_CUDNN_ALLOW_TF32", "on", 1);
  nn::cudnn::detail::reset_allow_tf32();
  EXPECT_TRUE(nn::cudnn::allow_tf32());
  setenv("DDP_CUDNN_ALLOW_TF32", "maybe", 1);
  nn::cudnn::detail::reset_allow_tf32();
  EXPECT_DDP_ERROR(nn::cudnn::allow_tf32(), ValueError, "DDP_CUDNN_ALLOW_TF32='maybe'");
  // The variable is read once: a set value wins over it.
  nn::cudnn::set_allow_tf32(true);
  EXPECT_TRUE(nn::cudnn::allow_tf32());
}

TEST_F(Tf32EnvTest, SetterAndGuard) {
  nn::cudnn::set_allow_tf32(false);
  EXPECT_FALSE(nn::cudnn::allow_tf32());
  {
    nn::cudnn::AllowTf32Guard on(true);
    EXPECT_TRUE(nn::cudnn::allow_tf32());
    {
      nn::cudnn::AllowTf32Guard off(false);
      EXPECT_FALSE(nn::cudnn::allow_tf32());
    }
    EXPECT_TRUE(nn::cudnn::allow_tf32());
  }
  EXPECT_FALSE(nn::cudnn::allow_tf32());
  // f32 CPU convolutions do not depend on it (the CPU has no TF32).
  manual_seed(4);
  Tensor x = randn({1, 3, 6, 6}), w = randn({2, 3, 3, 3});
  Tensor off = F::conv2d(x, w);
  nn::cudnn::set_allow_tf32(true);
  EXPECT_EQ(max_abs_error(F::conv2d(x, w), off), 0.0);
}

TEST(ModuleMemoryFormatTest, ChannelsLastRelaysFourDimTensorsInPlace) {
  manual_seed(5);
  auto conv = std::make_shared<nn::Conv2d>(3, 4, 3, 1, 1);
  Tensor x = randn({2, 3, 5, 5});
  sum(conv->forward(x)).backward();
  const TensorImpl* impl = conv->weight.impl();
  Tensor values = conv->weight.detach().clone(), grad = conv->weight.grad().clone();
  Tensor bias = conv->bias.detach().clone();
  conv->to(MemoryFormat::channels_last);
  EXPECT_EQ(conv->weight.impl(), impl);  // Note [Parameter identity]
  EXPECT_TRUE(is_channels_last(conv->weight));
  EXPECT_TRUE(conv->weight.requires_grad());
  EXPECT_TRUE(is_channels_last(conv->weight.grad()));
  EXPECT_EQ(max_abs_error(conv->weight, values), 0.0);
  EXPECT_EQ(max_abs_error(conv->weight.grad(), grad), 0.0);
  EXPECT_TRUE(conv->bias.is_contiguous());  // 1-D: untouched
  EXPECT_EQ(max_abs_error(conv->bias, bias), 0.0);
  // Idempotent, and reversible.
  conv->to(MemoryFormat::channels_last);
  EXPECT_TRUE(is_channels_last(conv->weight));
  conv->to(MemoryFormat::contiguous);
  EXPECT_TRUE(conv->weight.is_contiguous());
  EXPECT_EQ(max_abs_error(conv->weight, values), 0.0);
}

// On the CPU, oneDNN reads a channels-last weight as ohwi (gohwi when
// grouped; Note [oneDNN layouts]): no copy and nothing counted, dw comes out
// channels-last like the weight, and y and dw equal the contiguous weight's.
TEST(ModuleMemoryFormatTest, ChannelsLastWeightOnTheCpuIsReadAsItIs) {
  for (int64_t groups : {1, 2}) {
    SCOPED_TRACE("groups " + std::to_string(groups));
    manual_seed(6);
    auto conv = std::make_shared<nn::Conv2d>(4, 6, 3, 1, 1, 1, groups);
    Tensor x = to_channels_last(randn({2, 4, 5, 5}));
    Tensor want = conv->forward(x);
    sum(want).backward();
    Tensor want_dw = conv->weight.grad().clone();
    conv->zero_grad();
    conv->to(MemoryFormat::channels_last);
    ASSERT_TRUE(is_channels_last(conv->weight));
    const int64_t before = F::layout_conversion_count();
    Tensor y = conv->forward(x);
    Tensor dy = to_channels_last(Tensor::ones(y.shape()));  // as the forward's output
    y.backward(dy);
    EXPECT_EQ(F::layout_conversion_count(), before);
    EXPECT_TRUE(is_channels_last(conv->weight.grad()));
    EXPECT_EQ(max_abs_error(y, want), 0.0);
    EXPECT_EQ(max_abs_error(conv->weight.grad(), want_dw), 0.0);
  }
}

}  // namespace
}  // namespace ddp::test
