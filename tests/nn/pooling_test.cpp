// Tests of nn::MaxPool2d and nn::AdaptiveAvgPool2d on the CPU: PyTorch golden
// values (output and input gradient), gradcheck in f64, NHWC inputs and bad
// inputs.
#include "ddp/nn/functional/pooling.h"

#include <memory>
#include <optional>

#include "ddp/autograd/gradcheck.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/pooling.h"
#include "nn/conv_golden_util.h"

namespace ddp::test {
namespace {

using nn::functional::to_channels_last;

void check_golden(nn::UnaryModule& m, const std::string& name, bool channels_last = false) {
  SCOPED_TRACE(name + (channels_last ? " nhwc" : ""));
  Tensor x = golden(name + ".x").detach();
  Tensor dy = golden(name + ".dy");
  if (channels_last) x = to_channels_last(x).detach(), dy = to_channels_last(dy);
  x.set_requires_grad();
  Tensor y = m.forward(x);
  sum(y * dy).backward();
  EXPECT_REL_NEAR(y, golden(name + ".y"), 1e-4);
  EXPECT_REL_NEAR(x.grad(), golden(name + ".dx"), 1e-4);
}

TEST(MaxPool2dTest, MatchesPyTorch) {
  nn::MaxPool2d k2(2), k3(3, 2, 1), rect({3, 2}, nn::Int2{2, 1}, nn::Int2{1, 0});
  for (bool cl : {false, true}) {
    check_golden(k2, "maxpool_k2", cl);
    check_golden(k3, "maxpool_k3s2p1", cl);
    check_golden(rect, "maxpool_rect", cl);
  }
}

TEST(MaxPool2dTest, Gradcheck) {
  manual_seed(5);
  // Distinct values, so no window has a tie that finite differences would split.
  Tensor x = (arange(0.0, 2 * 3 * 7 * 6, 1.0, kFloat64) * 0.37).reshape({2, 3, 7, 6});
  Tensor perm = randn({2 * 3 * 7 * 6}, kFloat64);
  x = (x.flatten() + perm * 0.01).reshape({2, 3, 7, 6}).detach().set_requires_grad();
  for (auto [k, s, p, d] :
       {std::tuple<int, int, int, int>{2, 2, 0, 1}, {3, 2, 1, 1}, {3, 1, 1, 2}}) {
    auto fn = [&](const Tensors& in) {
      return Tensors{nn::functional::max_pool2d(in[0], k, s, p, d)};
    };
    auto r = autograd::gradcheck(fn, {x});
    EXPECT_TRUE(r.ok) << "k=" << k << " s=" << s << " p=" << p << " d=" << d << ": " << r.message;
  }
}

TEST(MaxPool2dTest, BadInputs) {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back("pool", std::make_shared<nn::MaxPool2d>(3));
  EXPECT_DDP_ERROR(seq->forward(randn({3, 8, 8})), ShapeError,
                   "pool (MaxPool2d): expected a 4-D input [N, C, H, W], got f32[3, 8, 8]");
  EXPECT_DDP_ERROR(seq->forward(randn({1, 3, 2, 8})), ShapeError, "too small for kernel (3, 3)");
  EXPECT_DDP_ERROR(nn::MaxPool2d(2, 2, 2).forward(randn({1, 1, 4, 4})), ValueError,
                   "padding at most half the kernel");
}

TEST(AdaptiveAvgPool2dTest, MatchesPyTorch) {
  nn::AdaptiveAvgPool2d one(1), general({3, 4}), up({5, 4});
  for (bool cl : {false, true}) {
    check_golden(one, "adaptive_1x1", cl);
    check_golden(general, "adaptive_3x4", cl);
    check_golden(up, "adaptive_up", cl);
  }
  EXPECT_EQ(one.forward(randn({2, 5, 3, 3})).shape(), (Shape{2, 5, 1, 1}));
}

TEST(AdaptiveAvgPool2dTest, Gradcheck) {
  Tensor x = randn({2, 2, 5, 7}, kFloat64).set_requires_grad();
  for (nn::Int2 out : {nn::Int2(1), nn::Int2(2, 3), nn::Int2(5, 7), nn::Int2(6, 4)}) {
    auto fn = [&](const Tensors& in) {
      return Tensors{nn::functional::adaptive_avg_pool2d(in[0], out)};
    };
    auto r = autograd::gradcheck(fn, {x});
    EXPECT_TRUE(r.ok) << out.str() << ": " << r.message;
  }
}

TEST(AdaptiveAvgPool2dTest, BadInputs) {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
  EXPECT_DDP_ERROR(seq->forward(randn({2, 8})), ShapeError,
                   "avgpool (AdaptiveAvgPool2d): expected a 4-D input [N, C, H, W], got f32[2, 8]");
  EXPECT_DDP_ERROR(nn::AdaptiveAvgPool2d(0).forward(randn({1, 1, 2, 2})), ValueError,
                   "output_size must be positive");
}

}  // namespace
}  // namespace ddp::test
