// max_pool2d on channels-last (NHWC) CPU tensors (Note [Channels-last
// max_pool2d]): the NHWC kernels give exactly the NCHW kernels' values,
// argmax positions and gradients, keep the output and the input's gradient
// NHWC, and convert nothing (Note [Layout conversion count]).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ddp/autograd/gradcheck.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/layout_conversions.h"
#include "ddp/nn/functional/pooling.h"
#include "ddp/tensor/ops.h"
#include "kernel_list.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

struct Pool {
  Int2 kernel, stride, padding = 0, dilation = 1;
  std::string str() const {
    return "k=" + kernel.str() + " s=" + stride.str() + " p=" + padding.str() +
           " d=" + dilation.str();
  }
};

// Torch's max_pool2d configurations that matter: non-overlapping, the ResNet
// stem (3/2/1), overlapping with dilation, rectangular ones.
const std::vector<Pool> kPools = {
    {2, 2}, {3, 2, 1}, {3, 1, 1, 2}, {{3, 2}, {2, 1}, {1, 0}}, {{2, 3}, {1, 2}, {1, 1}, {2, 1}}};

// Logical (row-major [N, C, H, W]) values, whatever the strides; NaN-aware.
std::vector<double> values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }
void expect_same_values(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const std::vector<double> va = values(a), vb = values(b);
  for (size_t i = 0; i < va.size(); ++i)
    if (!(std::isnan(va[i]) && std::isnan(vb[i])))
      ASSERT_EQ(va[i], vb[i]) << what << " differs at element " << i;
}

// Tied values (0, 1 or 2) or distinct ones, in `dtype`, NCHW.
Tensor input(const Shape& shape, DType dtype, bool ties, Generator& gen) {
  Tensor r = randn(shape, TensorOptions(kFloat64), &gen);
  if (!ties) return r.to(dtype);
  std::vector<double> v = r.to_vector<double>();
  for (double& e : v) e = std::floor(std::fabs(e) * 1.5);
  return Tensor::from_vector(v, shape, TensorOptions(dtype));
}

// One NCHW and one NHWC run on the same values, forward and backward. The
// NHWC run's dy is NHWC or, with nchw_dy, NCHW (the kernel reads any strides).
void expect_layouts_agree(const Tensor& x, const Pool& p, bool nchw_dy, Generator& gen) {
  SCOPED_TRACE(p.str() + " x " + x.describe() + (nchw_dy ? " nchw dy" : ""));
  Tensor a = x.detach().clone().set_requires_grad();
  Tensor b = F::to_channels_last(x.detach()).detach().set_requires_grad();
  ASSERT_TRUE(F::is_channels_last(b));
  Tensor ya = F::max_pool2d(a, p.kernel, p.stride, p.padding, p.dilation);
  Tensor dy = randn(ya.shape(), TensorOptions(x.dtype()), &gen);
  ya.backward(dy);

  const int64_t before = F::layout_conversion_count();
  Tensor yb = F::max_pool2d(b, p.kernel, p.stride, p.padding, p.dilation);
  yb.backward(nchw_dy ? dy : F::to_channels_last(dy));
  EXPECT_EQ(F::layout_conversion_count() - before, 0) << "max_pool2d converted an NHWC input";

  expect_same_values(yb, ya, "output");
  expect_same_values(b.grad(), a.grad(), "input gradient");
  EXPECT_EQ(yb.dtype(), x.dtype());
  EXPECT_EQ(b.grad().dtype(), x.dtype());
  // A tensor with one channel or one pixel is NCHW and NHWC at once.
  if (yb.size(1) > 1 && yb.size(2) * yb.size(3) > 1)
    EXPECT_TRUE(F::is_channels_last(yb)) << "output strides " << shape_str(yb.strides());
  if (x.size(1) > 1 && x.size(2) * x.size(3) > 1)
    EXPECT_TRUE(F::is_channels_last(b.grad()))
        << "gradient strides " << shape_str(b.grad().strides());
}

TEST(MaxPool2dNhwcTest, MatchesNchwValuesAndGradients) {
  Generator gen(11);
  for (DType dtype : {kFloat32, kFloat64})
    for (bool ties : {false, true})
      for (const Shape& shape : std::vector<Shape>{{2, 3, 8, 8}, {3, 5, 7, 9}, {1, 4, 5, 6}})
        for (size_t i = 0; i < kPools.size(); ++i)
          expect_layouts_agree(input(shape, dtype, ties, gen), kPools[i], i % 2 == 1, gen);
}

TEST(MaxPool2dNhwcTest, OneChannelAndOnePixelOutputs) {
  Generator gen(12);
  // One channel (to_channels_last marks it NHWC), a 1×1 output, both.
  expect_layouts_agree(input({2, 1, 7, 6}, kFloat32, true, gen), {3, 2, 1}, false, gen);
  expect_layouts_agree(input({2, 6, 3, 3}, kFloat64, false, gen), {3, 3}, false, gen);
  expect_layouts_agree(input({1, 1, 2, 2}, kFloat32, false, gen), {2, 2}, true, gen);
}

// The argmax positions themselves: both kernels store h·W + w in the plane,
// the first maximum of a window in (row, column) order, and the same NaN.
TEST(MaxPool2dNhwcTest, KernelsRecordTheSameArgmax) {
  Generator gen(13);
  for (bool with_nan : {false, true}) {
    Tensor x = input({2, 3, 6, 7}, kFloat32, /*ties=*/true, gen);
    if (with_nan) {
      std::vector<double> v = values(x);
      for (size_t i = 0; i < v.size(); i += 5) v[i] = NAN;
      x = Tensor::from_vector(v, x.shape(), TensorOptions(kFloat32));
    }
    for (const Pool& p : kPools) {
      SCOPED_TRACE(p.str() + (with_nan ? " with NaN" : ""));
      const int64_t oh = F::conv_output_size(6, p.kernel.h, p.stride.h, p.padding.h, p.dilation.h);
      const int64_t ow = F::conv_output_size(7, p.kernel.w, p.stride.w, p.padding.w, p.dilation.w);
      Tensor y = Tensor::empty({6, oh, ow}), idx = Tensor::empty({6, oh, ow}, kInt64);
      kernels::call<kernels::max_pool2d_forward>(Device::cpu(), x.view({6, 6, 7}), p.kernel,
                                                 p.stride, p.padding, p.dilation, y, idx);
      Tensor xc = F::to_channels_last(x);
      Tensor yc = F::empty_nchw({2, 3, oh, ow}, kFloat32, Device::cpu(), true);
      Tensor idxc = F::empty_nchw({2, 3, oh, ow}, kInt64, Device::cpu(), true);
      kernels::call<kernels::max_pool2d_forward_nhwc>(Device::cpu(), xc, p.kernel, p.stride,
                                                      p.padding, p.dilation, yc, idxc);
      expect_same_values(idxc, idx.view({2, 3, oh, ow}), "indices");
      expect_same_values(yc, y.view({2, 3, oh, ow}), "output");
      if (with_nan) {  // the NaNs win
        const std::vector<double> v = values(yc);
        EXPECT_TRUE(std::any_of(v.begin(), v.end(), [](double e) { return std::isnan(e); }));
      }
    }
  }
}

TEST(MaxPool2dNhwcTest, TiesSendTheGradientToTheFirstMaximum) {
  Tensor x = F::to_channels_last(Tensor::ones({1, 2, 4, 4})).detach().set_requires_grad();
  F::max_pool2d(x, 2, 2).backward(F::to_channels_last(Tensor::ones({1, 2, 2, 2})));
  std::vector<double> expected(32, 0.0);
  for (int c = 0; c < 2; ++c)
    for (int r : {0, 2})
      for (int col : {0, 2}) expected[size_t(c * 16 + r * 4 + col)] = 1.0;
  EXPECT_EQ(values(x.grad()), expected);
}

TEST(MaxPool2dNhwcTest, GradcheckF64) {
  manual_seed(14);
  // Distinct values, so no window has a tie that finite differences would split.
  Tensor x = (arange(0.0, 2 * 3 * 7 * 6, 1.0, kFloat64) * 0.37).reshape({2, 3, 7, 6});
  x = F::to_channels_last(x + randn({2, 3, 7, 6}, kFloat64) * 0.01).detach().set_requires_grad();
  ASSERT_TRUE(F::is_channels_last(x));
  for (const Pool& p : kPools) {
    auto fn = [&](const Tensors& in) {
      return Tensors{F::max_pool2d(in[0], p.kernel, p.stride, p.padding, p.dilation)};
    };
    auto r = autograd::gradcheck(fn, {x});
    EXPECT_TRUE(r.ok) << p.str() << ": " << r.message;
  }
}

TEST(MaxPool2dNhwcTest, HalfPrecisionStaysNhwc) {
  Generator gen(15);
  Tensor x = F::to_channels_last(input({2, 4, 6, 6}, kFloat32, false, gen));
  for (DType dtype : {kFloat16, kBFloat16}) {
    Tensor y = F::max_pool2d(x.to(dtype), 3, 2, 1);
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_TRUE(F::is_channels_last(y));
    expect_same_values(y, F::max_pool2d(x.to(dtype).contiguous(), 3, 2, 1), "half output");
  }
}

// The planar path counts the copies it makes: a strided (transposed) input.
TEST(MaxPool2dNhwcTest, StridedNchwInputCountsItsCopy) {
  Tensor x = randn({2, 3, 6, 8}).permute({0, 1, 3, 2});
  ASSERT_FALSE(x.is_contiguous() || F::is_channels_last(x));
  const int64_t before = F::layout_conversion_count();
  F::max_pool2d(x, 2, 2);
  EXPECT_EQ(F::layout_conversion_count() - before, 1);
}

TEST(MaxPool2dNhwcTest, BadNhwcInputs) {
  EXPECT_DDP_ERROR(F::max_pool2d(F::to_channels_last(randn({1, 3, 2, 8})), 3, 3), ShapeError,
                   "too small for kernel (3, 3)");
  EXPECT_DDP_ERROR(F::max_pool2d(F::to_channels_last(randn({1, 3, 4, 4})), 2, 2, 2), ValueError,
                   "padding at most half the kernel");
  EXPECT_DDP_ERROR(F::max_pool2d(F::to_channels_last(Tensor::ones({1, 3, 4, 4}, kInt64)), 2, 2),
                   DTypeError, "expected a floating input");
}

}  // namespace
}  // namespace ddp::test
