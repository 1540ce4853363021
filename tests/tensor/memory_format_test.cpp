// Note [Memory-format propagation]: elementwise results, casts, clones,
// *_like tensors and gradients keep a dense input's memory order; the
// values are those of the same ops on contiguous tensors.

#include <gtest/gtest.h>

#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/tensor/ops.h"
#include "ddp/tensor/memory_format.h"

namespace ddp {
namespace {

// [N, C, H, W] with NHWC strides (C innermost), filled with 0.25·i − 3.
Tensor nhwc(int64_t n, int64_t c, int64_t h, int64_t w, DType dt = DType::f32) {
  Tensor t = Tensor::empty({n, h, w, c}, TensorOptions(dt)).permute({0, 3, 1, 2});
  autograd::NoGradGuard no_grad;
  t.copy_(arange(0, double(n * c * h * w), 1, DType::f32).reshape({n, c, h, w}) * 0.25 - 3.0);
  return t;
}
Shape nhwc_strides(int64_t c, int64_t h, int64_t w) { return {h * w * c, 1, w * c, c}; }

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

TEST(MemoryFormat, DenseLayoutStrides) {
  Shape s;
  ASSERT_TRUE(dense_layout_strides(nhwc(2, 3, 4, 5), &s));
  EXPECT_EQ(s, nhwc_strides(3, 4, 5));
  Tensor x = Tensor::zeros({4, 6});
  EXPECT_TRUE(dense_layout_strides(x.t(), &s));
  EXPECT_EQ(s, (Shape{1, 6}));
  EXPECT_FALSE(dense_layout_strides(x.narrow(1, 0, 3), &s));      // gaps
  EXPECT_FALSE(dense_layout_strides(Tensor::zeros({3}).expand({4, 3}), &s));  // overlap
  EXPECT_FALSE(dense_layout_strides(Tensor(), &s));
  EXPECT_FALSE(dense_layout_strides(Tensor::zeros({0, 3}), &s));
}

TEST(MemoryFormat, UnaryKeepsChannelsLast) {
  Tensor x = nhwc(2, 3, 4, 5);
  for (const Tensor& y : {relu(x), exp(x), neg(x), sigmoid(x)}) {
    EXPECT_EQ(y.strides(), nhwc_strides(3, 4, 5));
  }
  EXPECT_EQ(values(relu(x)), values(relu(x.contiguous())));
  EXPECT_EQ(values(exp(x)), values(exp(x.contiguous())));
}

TEST(MemoryFormat, BinaryFollowsTheDenseOperand) {
  Tensor a = nhwc(2, 3, 4, 5), b = nhwc(2, 3, 4, 5) * 0.5;
  Tensor ac = a.contiguous();
  const Shape cl = nhwc_strides(3, 4, 5), contig = contiguous_strides({2, 3, 4, 5});
  EXPECT_EQ(add(a, b).strides(), cl);
  EXPECT_EQ(mul(a, 2.0).strides(), cl);               // a scalar decides nothing
  EXPECT_EQ(add(a, ac).strides(), cl);                // the first dense operand decides
  EXPECT_EQ(add(ac, a).strides(), contig);
  Tensor per_channel = Tensor::ones({1, 3, 1, 1}) * 2.0;
  EXPECT_EQ(mul(a, per_channel).strides(), cl);       // a broadcast operand decides nothing
  EXPECT_EQ(mul(per_channel, a).strides(), cl);
  EXPECT_EQ(sub(Tensor::ones({5}), a).strides(), cl);
  EXPECT_EQ(values(add(a, b)), values(add(ac, b.contiguous())));
  EXPECT_EQ(values(mul(per_channel, a)), values(mul(per_channel, ac)));
  EXPECT_EQ(values(add(ac, a)), values(add(ac, ac)));
  // Comparisons and where too.
  EXPECT_EQ(gt(a, 0.0).strides(), cl);
  EXPECT_EQ(where(gt(a, 0.0), a, b).strides(), cl);
  EXPECT_EQ(values(where(gt(a, 0.0), a, b)), values(where(gt(ac, 0.0), ac, b.contiguous())));
}

TEST(MemoryFormat, OtherPermutationsAndNonDenseInputs) {
  Tensor x = arange(0, 24, 1, DType::f32).reshape({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});  // dense, dims in another order
  EXPECT_EQ(relu(p).strides(), p.strides());
  EXPECT_EQ(values(relu(p)), values(relu(p.contiguous())));
  Tensor sliced = x.slice(2, 0, 4, 2);  // gaps: the result is contiguous
  EXPECT_EQ(neg(sliced).strides(), contiguous_strides(sliced.shape()));
  EXPECT_EQ(values(neg(sliced)), values(neg(sliced.contiguous())));
  Tensor expanded = Tensor::ones({3, 1}).expand({3, 4});
  EXPECT_EQ(neg(expanded).strides(), contiguous_strides({3, 4}));
}

TEST(MemoryFormat, CastsClonesAndLikesKeepTheLayout) {
  Tensor x = nhwc(2, 3, 4, 5);
  const Shape cl = nhwc_strides(3, 4, 5);
  for (DType dt : {DType::f64, DType::bf16, DType::f16, DType::i32}) {
    Tensor y = x.to(dt);
    EXPECT_EQ(y.strides(), cl) << dtype_name(dt);
    EXPECT_EQ(values(y), values(x.contiguous().to(dt))) << dtype_name(dt);
  }
  EXPECT_EQ(x.clone().strides(), cl);
  EXPECT_EQ(values(x.clone()), values(x));
  EXPECT_EQ(empty_like(x).strides(), cl);
  EXPECT_EQ(zeros_like(x).strides(), cl);
  EXPECT_EQ(ones_like(x).strides(), cl);
  Tensor f = full_like(x, 2.5);
  EXPECT_EQ(f.strides(), cl);
  EXPECT_EQ(values(f), std::vector<double>(size_t(x.numel()), 2.5));
  // A view with gaps gives a contiguous copy.
  Tensor sliced = Tensor::zeros({4, 6}).narrow(1, 1, 3);
  EXPECT_EQ(sliced.clone().strides(), contiguous_strides({4, 3}));
  EXPECT_EQ(sliced.to(DType::f64).strides(), contiguous_strides({4, 3}));
}

TEST(MemoryFormat, GradientsKeepTheLayout) {
  Tensor x = nhwc(2, 3, 4, 5);
  x.set_requires_grad(true);
  Tensor w = Tensor::ones({1, 3, 1, 1}) * 0.5;
  Tensor y = add(mul(relu(x), w), exp(mul(x, 0.1)));
  EXPECT_EQ(y.strides(), nhwc_strides(3, 4, 5));
  sum(y).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().strides(), nhwc_strides(3, 4, 5));
  // Same values as on a contiguous leaf.
  Tensor xc = x.detach().contiguous();
  xc.set_requires_grad(true);
  sum(add(mul(relu(xc), w), exp(mul(xc, 0.1)))).backward();
  EXPECT_EQ(values(x.grad()), values(xc.grad()));
  // A second backward accumulates in place, keeping the layout.
  sum(mul(x, 2.0)).backward();
  EXPECT_EQ(x.grad().strides(), nhwc_strides(3, 4, 5));
  // A contiguous leaf gets a contiguous .grad even from channels-last work.
  Tensor leaf = Tensor::ones({2, 3, 4, 5});
  leaf.set_requires_grad(true);
  sum(mul(leaf, nhwc(2, 3, 4, 5))).backward();
  EXPECT_EQ(leaf.grad().strides(), contiguous_strides({2, 3, 4, 5}));
  EXPECT_EQ(values(leaf.grad()), values(nhwc(2, 3, 4, 5)));
}

}  // namespace
}  // namespace ddp
