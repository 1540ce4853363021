// Reductions over the outer dims of a tensor that lies with them outermost
// (a bias gradient's sum over the batch, an NHWC tensor's sum over N, H, W)
// go through Backend::reduce_cols without a transposed copy (Note [CUDA
// column reductions]). On every backend the result must be the one the
// copying path gives: the same values, indices and dtypes, bit for bit on
// the CPU, whose reduce_cols is the copy plus reduce_rows.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ddp/tensor/ops.h"
#include "ddp/tensor/tensor.h"

namespace ddp {
namespace {

Tensor values(const Shape& shape, DType dt) {
  std::vector<double> v(size_t(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double((i * 37 + 11) % 23) - 11.0 + 0.25 * double(i % 3);
  return Tensor::from_vector(v, shape, TensorOptions(is_floating(dt) ? dt : DType::f64)).to(dt);
}

void expect_identical(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(max_abs_error(a.to(DType::f64), b.to(DType::f64)), 0.0)
      << a.to_string() << "\nvs\n" << b.to_string();
}

TEST(ReduceLayout, ChannelsLastSumsOverNHWMatchTheContiguousCopy) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::i32, DType::u8}) {
    const Tensor nhwc = values({2, 5, 6, 7}, dt).permute({0, 3, 1, 2});  // [N, C, H, W] NHWC
    ASSERT_FALSE(nhwc.is_contiguous());
    const Tensor copy = nhwc.contiguous();
    expect_identical(sum(nhwc, {0, 2, 3}), sum(copy, {0, 2, 3}));
    expect_identical(sum(nhwc, {0, 2, 3}, true), sum(copy, {0, 2, 3}, true));
  }
}

TEST(ReduceLayout, OuterDimReductionsMatchTheCopy) {
  for (DType dt : {DType::f32, DType::i64, DType::bf16}) {
    const Tensor x = values({9, 4, 5}, dt);
    const Tensor xt = values({4, 9, 5}, dt).transpose(0, 1);  // dim 1 outermost in memory
    // Leading dims of a contiguous tensor (sum_to of a broadcast gradient).
    expect_identical(sum(x, {0}), sum(x.transpose(0, 2).contiguous().transpose(0, 2), {0}));
    expect_identical(sum_to(x, {5}), sum(x.contiguous(), {0, 1}));
    expect_identical(sum(xt, {1}), sum(xt.contiguous(), {1}));
    // Values and first indices of the extremes, ties included.
    for (bool is_max : {true, false}) {
      ValuesIndices a = is_max ? max(x, 0, true) : min(x, 0, true);
      const Tensor xc = x.transpose(0, 1).contiguous().transpose(0, 1);
      ValuesIndices b = is_max ? max(xc, 0, true) : min(xc, 0, true);
      expect_identical(a.values, b.values);
      expect_identical(a.indices, b.indices);
      expect_identical(is_max ? argmax(xt, 1) : argmin(xt, 1),
                       is_max ? argmax(xt.contiguous(), 1) : argmin(xt.contiguous(), 1));
    }
  }
}

TEST(ReduceLayout, EmptyOuterDimsSumToZeros) {
  const Tensor x = Tensor::empty({0, 3}, TensorOptions(DType::f32));
  expect_identical(sum(x, {0}), Tensor::zeros({3}, TensorOptions(DType::f32)));
  const Tensor nhwc = Tensor::empty({0, 2, 2, 3}, TensorOptions(DType::f32)).permute({0, 3, 1, 2});
  expect_identical(sum(nhwc, {0, 2, 3}), Tensor::zeros({3}, TensorOptions(DType::f32)));
}

TEST(ReduceLayout, ReducingAnEmptyDimWithoutIdentityIsRefused) {
  const Tensor x = Tensor::empty({0, 3}, TensorOptions(DType::f32));
  EXPECT_THROW(max(x, 0), IndexError);
  EXPECT_THROW(argmin(x, 0), IndexError);
}

}  // namespace
}  // namespace ddp
