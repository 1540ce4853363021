// Tests of nn::BatchNorm2d and nn::functional::batch_norm on the CPU:
// PyTorch golden values for a training step (output, gradients, updated
// running statistics) and eval, NHWC inputs, gradcheck in f64 in both
// modes, momentum=None, module layout and bad inputs.
#include "ddp/nn/batch_norm.h"

#include <memory>

#include "ddp/autograd/gradcheck.h"
#include "ddp/nn/functional/batch_norm.h"
#include "ddp/nn/functional/conv.h"
#include "nn/conv_golden_util.h"

namespace ddp::test {
namespace {

using nn::functional::is_channels_last;
using nn::functional::to_channels_last;

std::shared_ptr<nn::BatchNorm2d> golden_bn() {
  auto bn = std::make_shared<nn::BatchNorm2d>(3);
  for (const char* name : {"weight", "bias"})
    set_value(bn->parameter(name), golden(std::string("bn.") + name));
  for (const char* name : {"running_mean", "running_var"})
    set_value(bn->buffer(name), golden(std::string("bn.") + name));
  return bn;
}

// One train step, then eval on the same input, as make_conv_golden.py does.
void check_golden(bool channels_last) {
  SCOPED_TRACE(channels_last ? "nhwc" : "nchw");
  auto bn = golden_bn();
  for (const char* mode : {"train", "eval"}) {
    SCOPED_TRACE(mode);
    const std::string p = std::string("bn_") + mode + ".";
    bn->train(std::string(mode) == "train");
    bn->zero_grad();
    Tensor x = golden("bn.x").detach();
    Tensor dy = golden(p + "dy");
    if (channels_last) x = to_channels_last(x).detach(), dy = to_channels_last(dy);
    x.set_requires_grad();
    Tensor y = bn->forward(x);
    EXPECT_EQ(is_channels_last(y), channels_last);
    sum(y * dy).backward();
    EXPECT_REL_NEAR(y, golden(p + "y"), 1e-4);
    EXPECT_REL_NEAR(x.grad(), golden(p + "dx"), 1e-4);
    EXPECT_REL_NEAR(bn->weight.grad(), golden(p + "dweight"), 1e-4);
    EXPECT_REL_NEAR(bn->bias.grad(), golden(p + "dbias"), 1e-4);
    EXPECT_REL_NEAR(bn->running_mean, golden(p + "running_mean"), 1e-5);
    EXPECT_REL_NEAR(bn->running_var, golden(p + "running_var"), 1e-5);
  }
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);  // eval does not count
}

TEST(BatchNorm2dTest, MatchesPyTorchF32) { check_golden(false); }
TEST(BatchNorm2dTest, MatchesPyTorchF32ChannelsLast) { check_golden(true); }

TEST(BatchNorm2dTest, Gradcheck) {
  manual_seed(3);
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "train" : "eval");
    Tensor x = randn({3, 2, 4, 3}, kFloat64).set_requires_grad();
    Tensor w = (rand({2}, kFloat64) + 0.5).detach().set_requires_grad();
    Tensor b = randn({2}, kFloat64).set_requires_grad();
    Tensor rm = randn({2}, kFloat64), rv = rand({2}, kFloat64) + 0.5;
    auto fn = [&](const Tensors& in) {
      return Tensors{
          nn::functional::batch_norm(in[0], rm.clone(), rv.clone(), in[1], in[2], training)};
    };
    auto r = autograd::gradcheck(fn, {x, w, b});
    EXPECT_TRUE(r.ok) << r.message;
    auto fn_cl = [&](const Tensors& in) {
      return Tensors{nn::functional::batch_norm(to_channels_last(in[0]), rm, rv, Tensor(), Tensor(),
                                                training)};
    };
    r = autograd::gradcheck(fn_cl, {x});
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(BatchNorm2dTest, CumulativeMomentumAndNoTracking) {
  nn::BatchNorm2d bn(2, 1e-5, std::nullopt);
  Tensor x1 = randn({4, 2, 3, 3}), x2 = randn({4, 2, 3, 3});
  bn.forward(x1);
  bn.forward(x2);
  // momentum=None: the running mean is the plain average of the batch means.
  Tensor expected = (mean(x1, {0, 2, 3}) + mean(x2, {0, 2, 3})) * 0.5;
  EXPECT_REL_NEAR(bn.running_mean, expected, 1e-5);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);

  nn::BatchNorm2d plain(2, 1e-5, 0.1, /*affine=*/false, /*track_running_stats=*/false);
  EXPECT_TRUE(plain.named_parameters().empty());
  EXPECT_TRUE(plain.named_buffers().empty());
  plain.eval();  // without running statistics, eval uses the batch's too
  Tensor y = plain.forward(x1);
  EXPECT_LE(max_abs_error(mean(y, {0, 2, 3}), Tensor::zeros({2})), 1e-5);
}

TEST(BatchNorm2dTest, StateDictNamesLikeTorch) {
  nn::BatchNorm2d bn(4);
  EXPECT_EQ(bn.state_dict().keys(),
            (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                      "num_batches_tracked"}));
  EXPECT_EQ(bn.num_batches_tracked.dtype(), kInt64);
  EXPECT_EQ(bn.to_string(),
            "BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)");
}

TEST(BatchNorm2dTest, BadInputsNameTheModule) {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back("bn1", std::make_shared<nn::BatchNorm2d>(3));
  EXPECT_DDP_ERROR(seq->forward(randn({2, 3, 4})), ShapeError,
                   "bn1 (BatchNorm2d): expected an input [N, 3, H, W], got f32[2, 3, 4]");
  EXPECT_DDP_ERROR(seq->forward(randn({2, 4, 4, 4})), ShapeError, "got f32[2, 4, 4, 4]");
  EXPECT_DDP_ERROR(seq->forward(randn({1, 3, 1, 1})), ValueError, "more than 1 value per channel");
}

}  // namespace
}  // namespace ddp::test
