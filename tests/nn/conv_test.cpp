// Tests of nn::Conv2d and nn::functional::conv2d on the CPU: PyTorch golden
// values (forward and the three gradients) for stride, padding, dilation,
// groups and no-bias configurations in NCHW and NHWC, gradcheck in f64,
// the oneDNN primitive cache, initialisation and bad inputs.
#include "ddp/nn/conv.h"

#include <memory>

#include "ddp/autograd/gradcheck.h"
#include "nn/conv_golden_util.h"

namespace ddp::test {
namespace {

using nn::functional::is_channels_last;
using nn::functional::to_channels_last;

struct ConvCase {
  const char* name;
  int64_t cin, cout;
  nn::Int2 kernel, stride, padding, dilation;
  int64_t groups;
  bool bias;
};

// The configurations of make_conv_golden.py's CONV_CASES.
const ConvCase kCases[] = {
    {"conv_basic", 3, 4, 3, 1, 0, 1, 1, true},
    {"conv_stride2_pad1", 4, 6, 3, 2, 1, 1, 1, true},
    {"conv_dilation", 3, 5, {3, 2}, {1, 2}, {2, 1}, {2, 1}, 1, true},
    {"conv_groups", 4, 6, 3, 1, 1, 1, 2, true},
    {"conv_depthwise_nobias", 4, 8, 3, 2, 1, 1, 4, false},
    {"conv_1x1_nobias", 5, 7, 1, 1, 0, 1, 1, false},
};

std::shared_ptr<nn::Conv2d> make_conv(const ConvCase& c) {
  return std::make_shared<nn::Conv2d>(c.cin, c.cout, c.kernel, c.stride, c.padding, c.dilation,
                                      c.groups, c.bias);
}

// Runs one golden case through Conv2d (optionally with NHWC input and dy)
// and compares y and the gradients of x, weight and bias with PyTorch's.
void check_golden(const ConvCase& c, bool channels_last, DType dtype, double tol) {
  SCOPED_TRACE(std::string(c.name) + (channels_last ? " nhwc " : " nchw ") + dtype_name(dtype));
  const std::string p = std::string(c.name) + ".";
  auto conv = make_conv(c);
  conv->to(dtype);
  set_value(conv->weight, golden(p + "weight"));
  if (c.bias) set_value(conv->bias, golden(p + "bias"));
  Tensor x = golden(p + "x").to(dtype).detach();
  if (channels_last) x = to_channels_last(x).detach();
  x.set_requires_grad();
  Tensor y = conv->forward(x);
  EXPECT_EQ(is_channels_last(y), channels_last && !y.is_contiguous());
  Tensor dy = golden(p + "dy").to(dtype);
  if (channels_last) dy = to_channels_last(dy);
  sum(y * dy).backward();
  EXPECT_REL_NEAR(y.to(kFloat32), golden(p + "y"), tol);
  EXPECT_REL_NEAR(x.grad().to(kFloat32), golden(p + "dx"), tol);
  EXPECT_REL_NEAR(conv->weight.grad().to(kFloat32), golden(p + "dweight"), tol);
  if (c.bias) EXPECT_REL_NEAR(conv->bias.grad().to(kFloat32), golden(p + "dbias"), tol);
  if (channels_last) EXPECT_TRUE(is_channels_last(x.grad()) || x.grad().is_contiguous());
}

TEST(Conv2dTest, MatchesPyTorchF32) {
  for (const ConvCase& c : kCases) check_golden(c, /*channels_last=*/false, kFloat32, 1e-4);
}

TEST(Conv2dTest, MatchesPyTorchF32ChannelsLast) {
  for (const ConvCase& c : kCases) check_golden(c, /*channels_last=*/true, kFloat32, 1e-4);
}

// f64 runs the reference loops (Note [Conv2d backends]); they must agree
// with PyTorch to f32 rounding of the golden values.
TEST(Conv2dTest, ReferencePathMatchesPyTorchF64) {
  for (const ConvCase& c : kCases) check_golden(c, false, kFloat64, 1e-6);
  check_golden(kCases[3], true, kFloat64, 1e-6);
}

// CPU half precision runs in f32; bf16 keeps ~3 significant digits.
TEST(Conv2dTest, BFloat16OnCpuRunsInF32) { check_golden(kCases[1], false, kBFloat16, 3e-2); }

TEST(Conv2dTest, Gradcheck) {
  for (const ConvCase& c : kCases) {
    SCOPED_TRACE(c.name);
    manual_seed(7);
    auto conv = make_conv(c);
    conv->to(kFloat64);
    Tensor x = randn({2, c.cin, 6, 5}, kFloat64).set_requires_grad();
    Tensors inputs{x, conv->weight};
    if (c.bias) inputs.push_back(conv->bias);
    auto fn = [&](const Tensors& in) {
      return Tensors{
          nn::functional::conv2d(in[0], in[1], c.bias ? in[2] : Tensor(), conv->params())};
    };
    auto r = autograd::gradcheck(fn, inputs);
    EXPECT_TRUE(r.ok) << r.message;
    // And with NHWC input.
    auto fn_cl = [&](const Tensors& in) {
      return Tensors{nn::functional::conv2d(to_channels_last(in[0]), in[1],
                                            c.bias ? in[2] : Tensor(), conv->params())};
    };
    r = autograd::gradcheck(fn_cl, inputs);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// Channel counts the direct JIT kernels take (multiples of 8, with
// blocked weights and reorders around them; see Note [oneDNN layouts]),
// checked against the f64 reference loops in both layouts.
TEST(Conv2dTest, BlockedKernelsMatchTheF64Reference) {
  struct Case {
    int64_t cin, cout, k, stride, pad, groups;
  };
  for (Case c : {Case{16, 16, 3, 1, 1, 1}, Case{16, 32, 3, 2, 1, 1}, Case{32, 64, 1, 2, 0, 1},
                 Case{32, 32, 3, 1, 1, 4}}) {
    for (bool cl : {false, true}) {
      SCOPED_TRACE(fmt::format("{}->{} k{} s{} g{} {}", c.cin, c.cout, c.k, c.stride, c.groups,
                               cl ? "nhwc" : "nchw"));
      const nn::functional::Conv2dParams params{c.stride, c.pad, 1, c.groups};
      Tensor x64 = randn({3, c.cin, 9, 10}, kFloat64);
      Tensor w64 = randn({c.cout, c.cin / c.groups, c.k, c.k}, kFloat64);
      Tensor b64 = randn({c.cout}, kFloat64);
      auto run = [&](DType dt, Tensor& dx, Tensor& dw, Tensor& db) {
        Tensor x = x64.to(dt).detach();
        if (cl) x = to_channels_last(x).detach();
        x.set_requires_grad();
        Tensor w = w64.to(dt).detach(), b = b64.to(dt).detach();
        w.set_requires_grad(), b.set_requires_grad();
        Tensor y = nn::functional::conv2d(x, w, b, params);
        EXPECT_EQ(is_channels_last(y), cl);
        Tensor dy = tanh(y.detach());
        sum(y * dy).backward();
        dx = x.grad(), dw = w.grad(), db = b.grad();
        return y;
      };
      Tensor dx32, dw32, db32, dx64, dw64, db64;
      Tensor y32 = run(kFloat32, dx32, dw32, db32), y64 = run(kFloat64, dx64, dw64, db64);
      EXPECT_REL_NEAR(y32, y64.to(kFloat32), 1e-5);
      EXPECT_REL_NEAR(dx32, dx64.to(kFloat32), 1e-4);
      EXPECT_REL_NEAR(dw32, dw64.to(kFloat32), 1e-4);
      EXPECT_REL_NEAR(db32, db64.to(kFloat32), 1e-4);
    }
  }
}

// A grayscale batch is contiguous both ways; to_channels_last() marks it
// NHWC so that a channels-last model stays NHWC from its first conv on.
TEST(Conv2dTest, OneChannelInputCanBeChannelsLast) {
  Tensor x = randn({2, 1, 5, 6});
  EXPECT_FALSE(is_channels_last(x));
  Tensor xc = to_channels_last(x);
  EXPECT_TRUE(is_channels_last(xc));
  EXPECT_EQ(xc.stride(1), 1);
  EXPECT_TRUE(allclose(xc, x, 0, 0));
  Tensor w = randn({8, 1, 3, 3});
  Tensor y = nn::functional::conv2d(xc, w, Tensor(), {1, 1});
  EXPECT_TRUE(is_channels_last(y));
  EXPECT_REL_NEAR(y, nn::functional::conv2d(x, w, Tensor(), {1, 1}), 1e-6);
}

TEST(Conv2dTest, ReusesCachedPrimitives) {
  auto conv = std::make_shared<nn::Conv2d>(3, 5, 3, 1, 1);
  Tensor x = randn({1, 3, 11, 13}).set_requires_grad();
  sum(conv->forward(x)).backward();  // creates forward, backward-data, backward-weights
  auto before = nn::functional::conv2d_cache_stats(DeviceType::CPU);
  for (int i = 0; i < 3; ++i) sum(conv->forward(x)).backward();
  auto after = nn::functional::conv2d_cache_stats(DeviceType::CPU);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.hits, before.hits + 9);
  EXPECT_EQ(after.entries, before.entries);
}

TEST(Conv2dTest, ParametersAndInitLikeTorch) {
  nn::Conv2d conv(6, 8, {3, 5}, 1, 0, 1, /*groups=*/2);
  EXPECT_EQ(conv.weight.shape(), (Shape{8, 3, 3, 5}));
  EXPECT_EQ(conv.bias.shape(), (Shape{8}));
  EXPECT_EQ(conv.named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  const double bound = 1.0 / std::sqrt(3.0 * 3 * 5);  // kaiming_uniform(a=√5) on fan_in 45
  for (double v : values(conv.weight)) EXPECT_LE(std::abs(v), bound);
  for (double v : values(conv.bias)) EXPECT_LE(std::abs(v), bound);
  nn::Conv2d nobias(2, 2, 1, 1, 0, 1, 1, false);
  EXPECT_FALSE(nobias.bias.defined());
  EXPECT_EQ(nobias.named_parameters().keys(), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(nobias.to_string(), "Conv2d(2, 2, kernel_size=(1, 1), stride=(1, 1), bias=False)");
}

TEST(Conv2dTest, OutputShapes) {
  nn::Conv2d conv(3, 4, 3, 2, 1, 2);
  Tensor y = conv.forward(randn({2, 3, 9, 10}));
  // (9 + 2 − 2·2 − 1) / 2 + 1 = 4, (10 + 2 − 5) / 2 + 1 = 4
  EXPECT_EQ(y.shape(), (Shape{2, 4, 4, 4}));
}

TEST(Conv2dTest, BadInputsNameTheModule) {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Conv2d>(3, 4, 3));
  EXPECT_DDP_ERROR(seq->forward(randn({3, 8, 8})), ShapeError, "0 (Conv2d)");
  EXPECT_THAT(last_error_message(), ::testing::HasSubstr("[N, 3, H, W]"));
  EXPECT_THAT(last_error_message(), ::testing::HasSubstr("f32[3, 8, 8]"));
  EXPECT_DDP_ERROR(seq->forward(randn({1, 5, 8, 8})), ShapeError,
                   "0 (Conv2d): expected an input [N, 3, H, W], got f32[1, 5, 8, 8]");
  EXPECT_DDP_ERROR(seq->forward(randn({1, 3, 2, 8})), ShapeError, "too small for kernel (3, 3)");
  // Floor, not truncation: (2 − 2·1 − 1) / 3 + 1 would be 1 in C++.
  EXPECT_EQ(nn::functional::conv_output_size(2, 3, 3, 0, 1), 0);
  EXPECT_DDP_ERROR(seq->forward(randn({1, 3, 8, 8}, kFloat64)), DTypeError, "one floating dtype");
  EXPECT_DDP_ERROR(nn::Conv2d(3, 4, 3, 1, 0, 1, 2), ValueError, "divisible by groups");
  Tensor w = randn({4, 3, 3, 3});
  EXPECT_DDP_ERROR(nn::functional::conv2d(randn({1, 6, 5, 5}), w, Tensor(), {1, 0, 1, 3}),
                   ShapeError, "conv2d: expected input[N, 9, H, W]");
  EXPECT_DDP_ERROR(nn::functional::conv2d(randn({1, 3, 5, 5}), w, randn({3})), ShapeError,
                   "expected a bias [4]");
  EXPECT_DDP_ERROR(nn::functional::conv2d(randn({1, 3, 5, 5}), w, Tensor(), {0}), ValueError,
                   "must be positive");
}

}  // namespace
}  // namespace ddp::test
