// Tests of the Tensor class (ddp/tensor/tensor.h) on the CPU: factories,
// metadata, views, copies and conversions, in-place arithmetic, and every
// error path, which must raise the right ddp::Error subclass with a message
// that names the op and ends with "(file.cpp:line)" (Note [Error messages]).
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <regex>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/dispatch.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/tensor.h"

#include "tensor/tensor_test_util.h"

namespace ddp {
namespace {

using namespace tensor_test;

TEST(TensorFactory, ZerosOnesFullForEveryDType) {
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor z = Tensor::zeros({2, 3}, dt);
    EXPECT_EQ(z.dtype(), dt);
    EXPECT_EQ(z.device(), Device::cpu());
    EXPECT_EQ(z.shape(), Shape({2, 3}));
    EXPECT_EQ(z.numel(), 6);
    EXPECT_EQ(z.nbytes(), 6 * element_size(dt));
    EXPECT_THAT(raw_values(z), ElementsAreArray(std::vector<double>(6, 0.0)));
    EXPECT_THAT(raw_values(Tensor::ones({2, 3}, dt)), ElementsAreArray(std::vector<double>(6, 1.0)));
    const double expected_seven = dt == DType::bool_ ? 1.0 : 7.0;
    EXPECT_THAT(raw_values(Tensor::full({4}, 7.0, dt)),
                ElementsAreArray(std::vector<double>(4, expected_seven)));
  }
  // Fractional fill values are exact where the dtype can hold them.
  EXPECT_THAT(raw_values(Tensor::full({2}, -2.5, DType::f16)), ElementsAre(-2.5, -2.5));
  EXPECT_THAT(raw_values(Tensor::full({2}, 0.25, DType::f64)), ElementsAre(0.25, 0.25));
}

TEST(TensorFactory, Empty) {
  for (DType dt : kAllDTypes) {
    Tensor t = Tensor::empty({3, 5}, dt);
    EXPECT_EQ(t.dtype(), dt);
    EXPECT_EQ(t.strides(), Shape({5, 1}));
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_NE(t.data_ptr(), nullptr);
    EXPECT_GE(t.storage().nbytes(), 15 * element_size(dt));
  }
  Tensor e = Tensor::empty({0});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.dim(), 1);
  EXPECT_TRUE(Tensor::empty({2, 0, 3}).is_contiguous());
  EXPECT_EQ(Tensor::empty({2, 0, 3}).numel(), 0);
  EXPECT_TRUE(values(Tensor::zeros({2, 0})).empty());
}

TEST(TensorFactory, Scalar) {
  Tensor s = Tensor::scalar(4.5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_TRUE(s.shape().empty());
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s.dtype(), DType::f32);
  EXPECT_EQ(s.item<float>(), 4.5f);
  EXPECT_EQ(s.describe(), "f32[] on cpu");
  Tensor i = Tensor::scalar(-3, DType::i64);
  EXPECT_EQ(i.item<int64_t>(), -3);
  EXPECT_EQ(Tensor::scalar(1, DType::bool_).item<bool>(), true);
}

TEST(TensorFactory, FromVectorForEveryDType) {
  auto check = [&]<class T>() {
    SCOPED_TRACE(dtype_name(dtype_of<T>()));
    std::vector<T> v;
    for (int i = 0; i < 6; ++i) v.push_back(std::is_same_v<T, bool> ? T(i % 2) : T(float(i)));
    Tensor t = Tensor::from_vector<T>(v, {2, 3}, dtype_of<T>());
    EXPECT_EQ(t.dtype(), dtype_of<T>());
    EXPECT_EQ(t.shape(), Shape({2, 3}));
    const T* p = t.data<T>();
    for (int i = 0; i < 6; ++i) EXPECT_EQ(float(p[i]), float(v[size_t(i)])) << i;
    std::vector<T> back = t.to_vector<T>();
    ASSERT_EQ(back.size(), 6u);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(float(back[size_t(i)]), float(v[size_t(i)])) << i;
  };
  for (DType dt : kAllDTypes) dispatch_all(dt, "test", check);
}

TEST(TensorFactory, FromVectorCastsToTheRequestedDType) {
  // Without a dtype in the options the tensor takes T's dtype; with one, the
  // values are cast to it.
  Tensor a = Tensor::from_vector<int64_t>({1, 2, 3}, {3});
  EXPECT_EQ(a.dtype(), DType::i64);
  EXPECT_THAT(raw_values(a), ElementsAre(1, 2, 3));
  Tensor b = Tensor::from_vector<double>({1.9, -1.9, 0.0}, {3}, DType::i32);
  EXPECT_EQ(b.dtype(), DType::i32);
  EXPECT_THAT(raw_values(b), ElementsAre(1, -1, 0));
  Tensor c = Tensor::from_vector<float>({0.0f, 0.5f, 2.0f}, {3}, DType::bool_);
  EXPECT_THAT(raw_values(c), ElementsAre(0, 1, 1));
  Tensor s = Tensor::from_vector<float>({5.0f}, {});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<float>(), 5.0f);
}

TEST(TensorFactory, FromStorageWrapsWithoutCopy) {
  Storage st = Storage::allocate(12 * sizeof(float), Device::cpu());
  float* p = static_cast<float*>(st.data());
  for (int i = 0; i < 12; ++i) p[i] = float(i);
  Tensor t = Tensor::from_storage(st, {2, 2}, {4, 2}, 1, DType::f32);
  EXPECT_TRUE(t.storage().is_same(st));
  EXPECT_EQ(t.offset(), 1);
  EXPECT_EQ(t.strides(), Shape({4, 2}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_THAT(values(t), ElementsAre(1, 3, 5, 7));
  p[3] = 42;
  EXPECT_THAT(values(t), ElementsAre(1, 42, 5, 7));
}

TEST(TensorFactory, FromStorageRejectsBadLayouts) {
  Storage st = Storage::allocate(12 * sizeof(float), Device::cpu());
  // Exactly the whole storage is fine; one element more is not.
  EXPECT_NO_THROW(Tensor::from_storage(st, {3, 4}, {4, 1}, 0, DType::f32));
  EXPECT_DDP_ERROR(Tensor::from_storage(st, {3, 4}, {4, 1}, 1, DType::f32), ShapeError,
                   "from_storage");
  EXPECT_DDP_ERROR(Tensor::from_storage(st, {13}, {1}, 0, DType::f32), ShapeError, "from_storage");
  EXPECT_DDP_ERROR(Tensor::from_storage(st, {12}, {1}, 0, DType::f64), ShapeError, "from_storage");
  EXPECT_DDP_ERROR(Tensor::from_storage(st, {3, 4}, {1}, 0, DType::f32), ShapeError,
                   "from_storage");
  EXPECT_DDP_ERROR(Tensor::from_storage(st, {2}, {-1}, 1, DType::f32), ShapeError, "from_storage");
  EXPECT_DDP_ERROR(Tensor::from_storage(st, {2}, {1}, -1, DType::f32), ShapeError, "from_storage");
}

TEST(TensorFactory, NegativeSizesAndSizeMismatchesRaise) {
  EXPECT_DDP_ERROR(Tensor::empty({2, -1}), ShapeError, "empty");
  EXPECT_DDP_ERROR(Tensor::zeros({-3}), ShapeError, "[-3]");
  EXPECT_DDP_ERROR(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), ShapeError, "from_vector");
  EXPECT_DDP_ERROR(Tensor::from_vector<float>({1, 2, 3, 4, 5}, {2, 2}), ShapeError, "from_vector");
  EXPECT_DDP_ERROR(Tensor::from_vector<float>({}, {}), ShapeError, "from_vector");
  EXPECT_DDP_ERROR(Tensor::from_vector<float>({1}, {-1}), ShapeError, "from_vector");
}

// ---- metadata -----------------------------------------------------------------

TEST(TensorMeta, ShapeStridesNumel) {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::f64);
  EXPECT_EQ(t.shape(), Shape({2, 3, 4}));
  EXPECT_EQ(t.strides(), Shape({12, 4, 1}));
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 24u * 8);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(-3), 2);
  EXPECT_EQ(t.stride(1), 4);
  EXPECT_EQ(t.stride(-1), 1);
  EXPECT_EQ(t.offset(), 0);
  EXPECT_TRUE(t.defined());
  EXPECT_FALSE(t.is_cuda());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.impl()->shape, t.shape());
}

TEST(TensorMeta, Describe) {
  EXPECT_EQ(Tensor::zeros({2, 3}).describe(), "f32[2, 3] on cpu");
  EXPECT_EQ(Tensor::zeros({4}, DType::bf16).describe(), "bf16[4] on cpu");
  EXPECT_EQ(Tensor::zeros({1, 0, 2}, DType::i64).describe(), "i64[1, 0, 2] on cpu");
  EXPECT_EQ(Tensor::zeros({2}, DType::bool_).describe(), "bool[2] on cpu");
  EXPECT_EQ(Tensor().describe(), "undefined tensor");
  std::string s = Tensor::from_vector<float>({1, 2.5f}, {2}).to_string();
  EXPECT_THAT(s, HasSubstr("f32[2] on cpu"));
  EXPECT_THAT(s, HasSubstr("2.5"));
}

TEST(TensorMeta, ShapeHelpers) {
  EXPECT_EQ(contiguous_strides({2, 3, 4}), Shape({12, 4, 1}));
  EXPECT_EQ(contiguous_strides({}), Shape({}));
  EXPECT_EQ(contiguous_strides({5}), Shape({1}));
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(shape_numel({2, 0}), 0);
  EXPECT_EQ(shape_str({2, 3}), "[2, 3]");
  EXPECT_EQ(shape_str({}), "[]");
  EXPECT_EQ(shape_str({7}), "[7]");
}

TEST(TensorMeta, WrapDim) {
  EXPECT_EQ(wrap_dim(0, 3, "op"), 0);
  EXPECT_EQ(wrap_dim(2, 3, "op"), 2);
  EXPECT_EQ(wrap_dim(-1, 3, "op"), 2);
  EXPECT_EQ(wrap_dim(-3, 3, "op"), 0);
  // A 0-dim tensor accepts 0 and -1, like torch.
  EXPECT_EQ(wrap_dim(0, 0, "op"), 0);
  EXPECT_EQ(wrap_dim(-1, 0, "op"), 0);
  EXPECT_DDP_ERROR(wrap_dim(3, 3, "my_op"), IndexError, "my_op");
  EXPECT_DDP_ERROR(wrap_dim(-4, 3, "my_op"), IndexError, "my_op");
  EXPECT_DDP_ERROR(wrap_dim(1, 0, "other_op"), IndexError, "other_op");
  EXPECT_DDP_ERROR(wrap_dim(-2, 0, "other_op"), IndexError, "other_op");
  EXPECT_DDP_ERROR(wrap_dim(std::numeric_limits<int64_t>::min(), 2, "huge"), IndexError, "huge");
}

TEST(TensorMeta, SizeAndStrideOutOfRange) {
  Tensor t = Tensor::zeros({2, 3});
  EXPECT_DDP_ERROR(t.size(2), IndexError, "size");
  EXPECT_DDP_ERROR(t.size(-3), IndexError, "size");
  EXPECT_DDP_ERROR(t.stride(5), IndexError, "stride");
}

TEST(TensorMeta, IsContiguous) {
  Tensor x = arange_tensor({3, 4});
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_FALSE(x.t().is_contiguous());
  EXPECT_FALSE(x.narrow(1, 0, 2).is_contiguous());
  EXPECT_TRUE(x.narrow(0, 1, 2).is_contiguous());  // whole rows
  EXPECT_TRUE(x.narrow(0, 1, 1).is_contiguous());  // a size-1 dim's stride does not matter
  EXPECT_FALSE(x.select(1, 0).is_contiguous());    // a column: stride 4
  EXPECT_TRUE(x.select(0, 2).is_contiguous());     // a row
  EXPECT_FALSE(x.slice(1, 0, 4, 2).is_contiguous());
  EXPECT_FALSE(Tensor::zeros({3, 1}).expand({3, 4}).is_contiguous());
}

TEST(TensorMeta, DataPointers) {
  Tensor x = arange_tensor({3, 4});
  float* base = x.data<float>();
  EXPECT_EQ(static_cast<void*>(base), x.data_ptr());
  EXPECT_EQ(x.storage().data(), x.data_ptr());
  Tensor v = x.narrow(1, 2, 2);
  EXPECT_EQ(v.data<float>(), base + 2);
  EXPECT_EQ(x.select(0, 1).data<float>(), base + 4);
  EXPECT_EQ(*x.select(0, 2).narrow(0, 1, 1).data<float>(), 9.0f);
}

TEST(TensorMeta, DataWithTheWrongTypeRaisesDTypeError) {
  Tensor x = Tensor::zeros({2});
  EXPECT_DDP_ERROR(x.data<double>(), DTypeError, "data");
  EXPECT_DDP_ERROR(x.data<int32_t>(), DTypeError, "f32[2] on cpu");
  EXPECT_DDP_ERROR(Tensor::zeros({2}, DType::f16).data<BFloat16>(), DTypeError, "data");
  EXPECT_DDP_ERROR(Tensor::zeros({2}, DType::u8).data<bool>(), DTypeError, "data");
  EXPECT_NO_THROW(x.data<float>());
}

TEST(TensorMeta, UndefinedTensorRaisesInsteadOfCrashing) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_EQ(u.impl(), nullptr);
  EXPECT_DDP_ERROR(u.shape(), ValueError, "shape");
  EXPECT_DDP_ERROR(u.numel(), ValueError, "undefined");
  EXPECT_DDP_ERROR(u.dtype(), ValueError, "dtype");
  EXPECT_DDP_ERROR(u.data_ptr(), ValueError, "data_ptr");
  EXPECT_DDP_ERROR(u.view({1}), ValueError, "view");
  EXPECT_DDP_ERROR(u.to(DType::f64), ValueError, "to");
  EXPECT_DDP_ERROR(u.clone(), ValueError, "clone");
  EXPECT_DDP_ERROR(u.fill_(1.0), ValueError, "fill_");
  EXPECT_DDP_ERROR(u.item<float>(), ValueError, "item");
  Tensor x = Tensor::zeros({2});
  EXPECT_DDP_ERROR(x.copy_(u), ValueError, "copy_");
  EXPECT_DDP_ERROR(x.add_(u), ValueError, "add_");
}

// ---- views --------------------------------------------------------------------

TEST(TensorView, ViewInfersMinusOneAndSharesStorage) {
  Tensor x = arange_tensor({3, 4});
  Tensor v = x.view({2, -1});
  EXPECT_EQ(v.shape(), Shape({2, 6}));
  EXPECT_EQ(v.strides(), Shape({6, 1}));
  EXPECT_TRUE(v.storage().is_same(x.storage()));
  EXPECT_EQ(v.data_ptr(), x.data_ptr());
  EXPECT_THAT(values(v), ElementsAreArray(iota_values(12)));
  EXPECT_EQ(x.view({-1}).shape(), Shape({12}));
  EXPECT_EQ(x.view({2, 3, 2}).shape(), Shape({2, 3, 2}));
  EXPECT_EQ(x.view({1, 12, 1}).shape(), Shape({1, 12, 1}));
  EXPECT_EQ(Tensor::scalar(1).view({1, 1}).shape(), Shape({1, 1}));
  EXPECT_EQ(Tensor::zeros({1, 1}).view({}).dim(), 0);
  // Writes through the view show in the base.
  v.select(1, 5).fill_(-1);
  EXPECT_THAT(values(x), ElementsAre(0, 1, 2, 3, 4, -1, 6, 7, 8, 9, 10, -1));
}

TEST(TensorView, ViewOfANonContiguousTensorWhereStridesAllow) {
  Tensor x = arange_tensor({3, 4});
  // x.t() is [4, 3] with strides [1, 4]: its first dim can be split, as in
  // torch: x.t().view(2, 2, 3).stride() == (2, 1, 4).
  Tensor v = x.t().view({2, 2, 3});
  EXPECT_EQ(v.strides(), Shape({2, 1, 4}));
  EXPECT_TRUE(v.storage().is_same(x.storage()));
  EXPECT_THAT(values(v), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
}

TEST(TensorView, ViewErrors) {
  Tensor x = arange_tensor({3, 4});
  EXPECT_DDP_ERROR(x.view({5}), ShapeError, "view");
  EXPECT_DDP_ERROR(x.view({13}), ShapeError, "view");
  EXPECT_DDP_ERROR(x.view({5, -1}), ShapeError, "view");
  EXPECT_DDP_ERROR(x.view({-1, -1}), ShapeError, "view");
  EXPECT_DDP_ERROR(x.view({-2, 6}), ShapeError, "view");
  EXPECT_DDP_ERROR(x.view({0, -1}), ShapeError, "view");
  // Incompatible strides: a transposed tensor cannot be flattened in place.
  EXPECT_DDP_ERROR(x.t().view({12}), ShapeError, "view");
  EXPECT_DDP_ERROR(x.t().view({12}), ShapeError, "reshape");  // the hint
  EXPECT_DDP_ERROR(x.narrow(1, 0, 2).view({6}), ShapeError, "view");
}

TEST(TensorView, ReshapeViewsWhenPossibleAndCopiesOtherwise) {
  Tensor x = arange_tensor({3, 4});
  Tensor r = x.reshape({4, -1});
  EXPECT_EQ(r.shape(), Shape({4, 3}));
  EXPECT_TRUE(r.storage().is_same(x.storage()));
  Tensor c = x.t().reshape({12});
  EXPECT_FALSE(c.storage().is_same(x.storage()));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_THAT(values(c), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
  c.fill_(0);
  EXPECT_EQ(values(x)[1], 1.0);  // the copy is independent
  EXPECT_DDP_ERROR(x.reshape({5}), ShapeError, "reshape");
}

TEST(TensorView, Narrow) {
  Tensor x = arange_tensor({3, 4});
  Tensor n = x.narrow(1, 1, 2);
  EXPECT_EQ(n.shape(), Shape({3, 2}));
  EXPECT_EQ(n.strides(), Shape({4, 1}));
  EXPECT_EQ(n.offset(), 1);
  EXPECT_TRUE(n.storage().is_same(x.storage()));
  EXPECT_THAT(values(n), ElementsAre(1, 2, 5, 6, 9, 10));
  EXPECT_THAT(values(x.narrow(0, 2, 1)), ElementsAre(8, 9, 10, 11));
  EXPECT_THAT(values(x.narrow(-1, 3, 1)), ElementsAre(3, 7, 11));
  EXPECT_THAT(values(x.narrow(1, -2, 2)), ElementsAre(2, 3, 6, 7, 10, 11));  // start from the end
  EXPECT_EQ(x.narrow(1, 4, 0).numel(), 0);  // an empty narrow at the end is allowed
  n.fill_(-1);
  EXPECT_THAT(values(x), ElementsAre(0, -1, -1, 3, 4, -1, -1, 7, 8, -1, -1, 11));
}

TEST(TensorView, NarrowOutOfRangeRaisesIndexError) {
  Tensor x = arange_tensor({3, 4});
  EXPECT_DDP_ERROR(x.narrow(1, 3, 2), IndexError, "narrow");
  EXPECT_DDP_ERROR(x.narrow(1, 0, 5), IndexError, "narrow");
  EXPECT_DDP_ERROR(x.narrow(1, 5, 0), IndexError, "narrow");
  EXPECT_DDP_ERROR(x.narrow(1, 0, -1), IndexError, "narrow");
  EXPECT_DDP_ERROR(x.narrow(1, -5, 1), IndexError, "narrow");
  EXPECT_DDP_ERROR(x.narrow(2, 0, 1), IndexError, "narrow");
  EXPECT_DDP_ERROR(x.narrow(-3, 0, 1), IndexError, "narrow");
  EXPECT_DDP_ERROR(Tensor::scalar(1).narrow(0, 0, 1), IndexError, "narrow");
}

TEST(TensorView, SliceWithStep) {
  Tensor v = arange_tensor({10});
  Tensor s = v.slice(0, 1, 8, 3);
  EXPECT_EQ(s.shape(), Shape({3}));
  EXPECT_EQ(s.strides(), Shape({3}));
  EXPECT_EQ(s.offset(), 1);
  EXPECT_TRUE(s.storage().is_same(v.storage()));
  EXPECT_THAT(values(s), ElementsAre(1, 4, 7));
  EXPECT_THAT(values(v.slice(0, 0, 10, 4)), ElementsAre(0, 4, 8));
  EXPECT_THAT(values(v.slice(0, -3, 100)), ElementsAre(7, 8, 9));  // Python-style bounds
  EXPECT_THAT(values(v.slice(0, 2, -6)), ElementsAre(2, 3));
  EXPECT_EQ(v.slice(0, 5, 2).numel(), 0);
  Tensor x = arange_tensor({3, 4});
  Tensor c = x.slice(1, 0, 4, 2);
  EXPECT_EQ(c.shape(), Shape({3, 2}));
  EXPECT_EQ(c.strides(), Shape({4, 2}));
  EXPECT_THAT(values(c), ElementsAre(0, 2, 4, 6, 8, 10));
  c.fill_(100);
  EXPECT_THAT(values(x.select(0, 0)), ElementsAre(100, 1, 100, 3));
}

TEST(TensorView, SliceErrors) {
  Tensor v = arange_tensor({10});
  EXPECT_DDP_ERROR(v.slice(0, 0, 10, 0), ValueError, "slice");
  EXPECT_DDP_ERROR(v.slice(0, 0, 10, -1), ValueError, "slice");
  EXPECT_DDP_ERROR(v.slice(1, 0, 1), IndexError, "slice");
  EXPECT_DDP_ERROR(Tensor::scalar(1).slice(0, 0, 1), IndexError, "slice");
}

TEST(TensorView, Select) {
  Tensor x = arange_tensor({3, 4});
  Tensor r = x.select(0, 1);
  EXPECT_EQ(r.shape(), Shape({4}));
  EXPECT_EQ(r.offset(), 4);
  EXPECT_TRUE(r.storage().is_same(x.storage()));
  EXPECT_THAT(values(r), ElementsAre(4, 5, 6, 7));
  Tensor c = x.select(1, -1);
  EXPECT_EQ(c.shape(), Shape({3}));
  EXPECT_EQ(c.strides(), Shape({4}));
  EXPECT_THAT(values(c), ElementsAre(3, 7, 11));
  Tensor e = x.select(0, 2).select(0, 1);
  EXPECT_EQ(e.dim(), 0);
  EXPECT_EQ(e.item<float>(), 9.0f);
  EXPECT_THAT(values(x.select(-2, -3)), ElementsAre(0, 1, 2, 3));
}

TEST(TensorView, SelectOutOfRangeRaisesIndexError) {
  Tensor x = arange_tensor({3, 4});
  EXPECT_DDP_ERROR(x.select(0, 3), IndexError, "select");
  EXPECT_DDP_ERROR(x.select(0, -4), IndexError, "select");
  EXPECT_DDP_ERROR(x.select(1, 4), IndexError, "select");
  EXPECT_DDP_ERROR(x.select(2, 0), IndexError, "select");
  EXPECT_DDP_ERROR(Tensor::scalar(1).select(0, 0), IndexError, "select");
}

TEST(TensorView, TransposePermuteT) {
  Tensor x = arange_tensor({3, 4});
  Tensor t = x.transpose(0, 1);
  EXPECT_EQ(t.shape(), Shape({4, 3}));
  EXPECT_EQ(t.strides(), Shape({1, 4}));
  EXPECT_TRUE(t.storage().is_same(x.storage()));
  EXPECT_THAT(values(t), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
  EXPECT_EQ(x.transpose(-1, -2).strides(), Shape({1, 4}));
  EXPECT_EQ(x.t().strides(), Shape({1, 4}));
  EXPECT_EQ(x.transpose(1, 1).strides(), Shape({4, 1}));
  EXPECT_THAT(values(x.t().t()), ElementsAreArray(iota_values(12)));
  Tensor v = arange_tensor({5});
  EXPECT_EQ(v.t().shape(), Shape({5}));  // t() of 1-D is itself

  Tensor y = arange_tensor({2, 3, 4});
  Tensor p = y.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), Shape({4, 2, 3}));
  EXPECT_EQ(p.strides(), Shape({1, 12, 4}));  // torch: (1, 12, 4)
  EXPECT_TRUE(p.storage().is_same(y.storage()));
  EXPECT_EQ(p.select(0, 1).select(0, 1).select(0, 2).item<float>(), 12 + 2 * 4 + 1);
  EXPECT_EQ(y.permute({-1, 0, 1}).strides(), Shape({1, 12, 4}));
  // Writing through a transpose.
  x.t().select(0, 0).fill_(-5);
  EXPECT_THAT(values(x.select(1, 0)), ElementsAre(-5, -5, -5));
}

TEST(TensorView, PermuteAndTErrors) {
  Tensor y = arange_tensor({2, 3, 4});
  EXPECT_DDP_ERROR(y.permute({0, 0, 1}), IndexError, "permute");
  EXPECT_DDP_ERROR(y.permute({2, 1, -1}), IndexError, "permute");  // -1 is 2 again
  EXPECT_DDP_ERROR(y.permute({0, 1}), ShapeError, "permute");
  EXPECT_DDP_ERROR(y.permute({0, 1, 2, 3}), ShapeError, "permute");
  EXPECT_DDP_ERROR(y.permute({0, 1, 3}), IndexError, "permute");
  EXPECT_DDP_ERROR(y.t(), ShapeError, "t:");
  EXPECT_DDP_ERROR(y.transpose(0, 3), IndexError, "transpose");
}

TEST(TensorView, ExpandUsesStrideZero) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3}, {3, 1});
  Tensor e = a.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), Shape({2, 3, 4}));
  EXPECT_EQ(e.strides(), Shape({0, 1, 0}));
  EXPECT_TRUE(e.storage().is_same(a.storage()));
  EXPECT_EQ(e.numel(), 24);
  std::vector<double> expected;
  for (int i = 0; i < 2; ++i)
    for (int r = 1; r <= 3; ++r)
      for (int c = 0; c < 4; ++c) expected.push_back(r);
  EXPECT_THAT(values(e), ElementsAreArray(expected));
  Tensor k = a.expand({-1, 4});
  EXPECT_EQ(k.shape(), Shape({3, 4}));
  EXPECT_EQ(k.strides(), Shape({1, 0}));
  EXPECT_EQ(a.expand({3, 1}).shape(), Shape({3, 1}));
  EXPECT_EQ(Tensor::scalar(7).expand({2, 2}).strides(), Shape({0, 0}));
  EXPECT_THAT(values(Tensor::scalar(7).expand({2, 2})), ElementsAre(7, 7, 7, 7));
  EXPECT_EQ(a.expand({0, 3, 1}).numel(), 0);
  // A change in the base shows in every expanded position.
  a.select(0, 0).fill_(9);
  EXPECT_EQ(values(e)[0], 9.0);
  EXPECT_EQ(values(e)[12], 9.0);
}

TEST(TensorView, ExpandToAnIncompatibleShapeRaisesShapeError) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3}, {3, 1});
  EXPECT_DDP_ERROR(a.expand({4, 4}), ShapeError, "expand");
  EXPECT_DDP_ERROR(a.expand({3}), ShapeError, "expand");         // fewer dims
  EXPECT_DDP_ERROR(a.expand({-1, 3, 4}), ShapeError, "expand");  // -1 on a new dim
  EXPECT_DDP_ERROR(a.expand({6, 2}), ShapeError, "[3, 1]");
}

TEST(TensorView, UnsqueezeSqueezeFlatten) {
  Tensor x = arange_tensor({3, 4});
  EXPECT_EQ(x.unsqueeze(0).shape(), Shape({1, 3, 4}));
  EXPECT_EQ(x.unsqueeze(1).shape(), Shape({3, 1, 4}));
  EXPECT_EQ(x.unsqueeze(2).shape(), Shape({3, 4, 1}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), Shape({3, 4, 1}));
  EXPECT_TRUE(x.unsqueeze(0).storage().is_same(x.storage()));
  EXPECT_EQ(Tensor::scalar(1).unsqueeze(0).shape(), Shape({1}));
  EXPECT_DDP_ERROR(x.unsqueeze(3), IndexError, "unsqueeze");
  EXPECT_DDP_ERROR(x.unsqueeze(-4), IndexError, "unsqueeze");

  Tensor y = Tensor::zeros({1, 3, 1});
  EXPECT_EQ(y.squeeze(0).shape(), Shape({3, 1}));
  EXPECT_EQ(y.squeeze(-1).shape(), Shape({1, 3}));
  EXPECT_EQ(y.squeeze(1).shape(), Shape({1, 3, 1}));  // not size 1: unchanged, like torch
  EXPECT_TRUE(y.squeeze(0).storage().is_same(y.storage()));
  EXPECT_DDP_ERROR(y.squeeze(3), IndexError, "squeeze");
  // Unsqueeze and squeeze of a non-contiguous tensor stay views.
  Tensor t = x.t().unsqueeze(1);
  EXPECT_EQ(t.shape(), Shape({4, 1, 3}));
  EXPECT_TRUE(t.storage().is_same(x.storage()));
  EXPECT_THAT(values(t.squeeze(1)), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));

  Tensor z = arange_tensor({2, 3, 4});
  EXPECT_EQ(z.flatten().shape(), Shape({24}));
  EXPECT_TRUE(z.flatten().storage().is_same(z.storage()));
  EXPECT_EQ(z.flatten(1).shape(), Shape({2, 12}));
  EXPECT_EQ(z.flatten(0, 1).shape(), Shape({6, 4}));
  EXPECT_EQ(z.flatten(-2, -1).shape(), Shape({2, 12}));
  EXPECT_EQ(z.flatten(1, 1).shape(), Shape({2, 3, 4}));
  EXPECT_EQ(Tensor::scalar(3).flatten().shape(), Shape({1}));
  Tensor pf = z.permute({2, 0, 1}).flatten();  // not viewable: copies
  EXPECT_FALSE(pf.storage().is_same(z.storage()));
  EXPECT_EQ(values(pf)[1], 4.0);   // pf[1] = z[0][1][0]
  EXPECT_EQ(values(pf)[6], 1.0);   // pf[6] = z[0][0][1]
  EXPECT_DDP_ERROR(z.flatten(2, 1), IndexError, "flatten");
  EXPECT_DDP_ERROR(z.flatten(0, 3), IndexError, "flatten");
}

TEST(TensorView, Contiguous) {
  Tensor x = arange_tensor({3, 4});
  EXPECT_TRUE(x.contiguous().is_same(x));  // itself, no copy
  Tensor c = x.t().contiguous();
  EXPECT_FALSE(c.storage().is_same(x.storage()));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.shape(), Shape({4, 3}));
  EXPECT_EQ(c.strides(), Shape({3, 1}));
  EXPECT_THAT(raw_values(c), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
  Tensor e = Tensor::scalar(2).expand({2, 3}).contiguous();
  EXPECT_EQ(e.strides(), Shape({3, 1}));
  EXPECT_THAT(raw_values(e), ElementsAre(2, 2, 2, 2, 2, 2));
}

// ---- copies and conversions ---------------------------------------------------


}  // namespace
}  // namespace ddp
