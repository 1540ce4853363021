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

namespace ddp {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Checks that `stmt` throws exactly `Type` (not a base, not a subclass) with a
// message containing `substr` and ending with "(file.ext:line)".
#define EXPECT_DDP_ERROR(stmt, Type, substr)                                                  \
  do {                                                                                        \
    try {                                                                                     \
      stmt;                                                                                   \
      ADD_FAILURE() << "expected " #Type " from: " #stmt;                                     \
    } catch (const Type& e) {                                                                 \
      EXPECT_EQ(typeid(e), typeid(Type))                                                      \
          << #stmt " threw a subclass of " #Type ": " << e.what();                            \
      expect_error_message(e.what(), substr);                                                 \
    } catch (const std::exception& e) {                                                       \
      ADD_FAILURE() << "expected " #Type " from: " #stmt "; got " << typeid(e).name() << ": " \
                    << e.what();                                                              \
    }                                                                                         \
  } while (0)

void expect_error_message(const std::string& msg, const std::string& substr) {
  EXPECT_THAT(msg, HasSubstr(substr));
  EXPECT_TRUE(std::regex_search(msg, std::regex(R"(\([A-Za-z0-9_]+\.(cpp|h|cu):[0-9]+\)$)")))
      << "no (file:line) at the end of: " << msg;
}

// Reads a contiguous tensor's elements through data<T>() (not through to()),
// converted to double, so conversions can be checked independently.
std::vector<double> raw_values(const Tensor& t) {
  EXPECT_TRUE(t.is_contiguous());
  std::vector<double> out;
  dispatch_all(t.dtype(), "raw_values", [&]<class T>() {
    const T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        out.push_back(double(float(p[i])));
      else
        out.push_back(double(p[i]));
    }
  });
  return out;
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

std::vector<double> iota_values(int n, double start = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// 0..n-1 in the given shape (f32 unless told).
Tensor arange_tensor(const Shape& shape, DType dtype = DType::f32) {
  return Tensor::from_vector<double>(iota_values(int(shape_numel(shape))), shape, dtype);
}

// ---- factories ----------------------------------------------------------------

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

TEST(TensorCopy, CloneIsIndependentAndContiguous) {
  Tensor x = arange_tensor({3, 4});
  Tensor c = x.clone();
  EXPECT_FALSE(c.storage().is_same(x.storage()));
  EXPECT_EQ(c.dtype(), x.dtype());
  EXPECT_THAT(values(c), ElementsAreArray(values(x)));
  c.fill_(0);
  EXPECT_EQ(values(x)[5], 5.0);
  Tensor ct = x.t().clone();
  EXPECT_TRUE(ct.is_contiguous());
  EXPECT_THAT(raw_values(ct), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
  for (DType dt : kAllDTypes) EXPECT_EQ(Tensor::ones({2}, dt).clone().dtype(), dt);
}

TEST(TensorCopy, CopyBroadcastsAndCasts) {
  Tensor dst = Tensor::zeros({2, 3});
  dst.copy_(Tensor::from_vector<float>({1, 2, 3}, {3}));
  EXPECT_THAT(raw_values(dst), ElementsAre(1, 2, 3, 1, 2, 3));
  dst.copy_(Tensor::from_vector<float>({7, 8}, {2, 1}));
  EXPECT_THAT(raw_values(dst), ElementsAre(7, 7, 7, 8, 8, 8));
  dst.copy_(Tensor::scalar(-1.5));
  EXPECT_THAT(raw_values(dst), ElementsAre(-1.5, -1.5, -1.5, -1.5, -1.5, -1.5));
  // Dtype casts on the way.
  dst.copy_(Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3}, DType::i32));
  EXPECT_THAT(raw_values(dst), ElementsAre(1, 2, 3, 4, 5, 6));
  Tensor idst = Tensor::zeros({3}, DType::i64);
  idst.copy_(Tensor::from_vector<double>({1.7, -1.7, 100.2}, {3}, DType::f64));
  EXPECT_THAT(raw_values(idst), ElementsAre(1, -1, 100));
  Tensor hdst = Tensor::zeros({1}, DType::f16);
  hdst.copy_(Tensor::from_vector<float>({0.1f}, {1}));
  EXPECT_EQ(hdst.data<Half>()[0].bits, 0x2E66);  // torch: tensor([0.1]).half() is 0x2E66
  // copy_ returns *this.
  Tensor& ref = dst.copy_(Tensor::scalar(0));
  EXPECT_TRUE(ref.is_same(dst));
}

TEST(TensorCopy, CopyIntoNonContiguousViews) {
  Tensor base = Tensor::zeros({3, 4});
  base.t().copy_(arange_tensor({4, 3}));
  // base.t()[i][j] = 3i + j, so base[j][i] = 3i + j.
  EXPECT_THAT(raw_values(base), ElementsAre(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11));
  Tensor b2 = Tensor::zeros({3, 4});
  b2.narrow(1, 1, 2).copy_(Tensor::from_vector<float>({5, 6}, {2}));
  EXPECT_THAT(raw_values(b2), ElementsAre(0, 5, 6, 0, 0, 5, 6, 0, 0, 5, 6, 0));
  Tensor b3 = Tensor::zeros({6});
  b3.slice(0, 1, 6, 2).copy_(Tensor::ones({3}, DType::u8));
  EXPECT_THAT(raw_values(b3), ElementsAre(0, 1, 0, 1, 0, 1));
  // Source non-contiguous too.
  Tensor b4 = Tensor::zeros({4, 3}, DType::f64);
  b4.copy_(arange_tensor({3, 4}).t());
  EXPECT_THAT(raw_values(b4), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
}

TEST(TensorCopy, CopyErrorsNameCopy) {
  Tensor dst = Tensor::zeros({2, 3});
  EXPECT_DDP_ERROR(dst.copy_(Tensor::zeros({2})), ShapeError, "copy_");
  EXPECT_DDP_ERROR(dst.copy_(Tensor::zeros({3, 3})), ShapeError, "copy_");
  EXPECT_DDP_ERROR(dst.copy_(Tensor::zeros({2, 2, 3})), ShapeError, "copy_");
  // Writing into an expanded (overlapping) view would be ambiguous.
  Tensor e = Tensor::zeros({3, 1}).expand({3, 4});
  EXPECT_DDP_ERROR(e.copy_(Tensor::ones({3, 4})), ValueError, "copy_");
}

TEST(TensorCopy, ToDTypeForEveryPair) {
  const std::vector<double> src_values = {0, 1, 3, 100};
  for (DType from : kAllDTypes) {
    Tensor src = Tensor::from_vector<double>(src_values, {4}, from);
    std::vector<double> have = raw_values(src);
    for (DType to : kAllDTypes) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      Tensor out = src.to(to);
      EXPECT_EQ(out.dtype(), to);
      EXPECT_EQ(out.shape(), Shape({4}));
      std::vector<double> expected = have;
      if (to == DType::bool_)
        for (double& v : expected) v = v != 0 ? 1 : 0;
      EXPECT_THAT(raw_values(out), ElementsAreArray(expected));
      if (from != to) EXPECT_FALSE(out.storage().is_same(src.storage()));
    }
  }
}

TEST(TensorCopy, ToDTypeRoundingAndTruncation) {
  // torch: tensor([2.7, -2.7]).to(torch.int32) == [2, -2];
  //        tensor([300], dtype=torch.int32).to(torch.uint8) == [44]
  Tensor f = Tensor::from_vector<float>({2.7f, -2.7f, 0.5f}, {3});
  EXPECT_THAT(raw_values(f.to(DType::i32)), ElementsAre(2, -2, 0));
  EXPECT_THAT(raw_values(f.to(DType::i64)), ElementsAre(2, -2, 0));
  EXPECT_THAT(raw_values(f.to(DType::bool_)), ElementsAre(1, 1, 1));
  EXPECT_THAT(raw_values(Tensor::from_vector<int32_t>({300}, {1}, DType::i32).to(DType::u8)),
              ElementsAre(44));
  Tensor tenth = Tensor::from_vector<float>({0.1f}, {1});
  EXPECT_EQ(tenth.to(DType::f16).data<Half>()[0].bits, 0x2E66);       // torch
  EXPECT_EQ(tenth.to(DType::bf16).data<BFloat16>()[0].bits, 0x3DCD);  // torch
  EXPECT_EQ(Tensor::from_vector<float>({65520.0f}, {1}).to(DType::f16).data<Half>()[0].bits,
            0x7C00);  // overflow to inf
  Tensor d = Tensor::from_vector<double>({1.0 + 1e-12}, {1}, DType::f64);
  EXPECT_EQ(d.to(DType::f32).data<float>()[0], 1.0f);
  Tensor nan = Tensor::from_vector<float>({std::nanf("")}, {1});
  EXPECT_TRUE(std::isnan(float(nan.to(DType::f16).data<Half>()[0])));
  EXPECT_TRUE(std::isnan(nan.to(DType::f64).data<double>()[0]));
}

TEST(TensorCopy, ToNonContiguousSourceGivesRowMajorResult) {
  Tensor x = arange_tensor({3, 4});
  Tensor y = x.t().to(DType::f64);
  EXPECT_EQ(y.shape(), Shape({4, 3}));
  EXPECT_THAT(values(y), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
}

TEST(TensorCopy, ToTheSameDeviceAndDTypeIsANoOp) {
  Tensor x = arange_tensor({3, 4});
  EXPECT_TRUE(x.to(Device::cpu()).is_same(x));
  EXPECT_TRUE(x.cpu().is_same(x));
  EXPECT_TRUE(x.to(DType::f32).is_same(x));
  EXPECT_TRUE(x.to(Device::cpu(), DType::f32).is_same(x));
  Tensor d = x.to(Device::cpu(), DType::f64);
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_EQ(d.device(), Device::cpu());
  EXPECT_THAT(raw_values(d), ElementsAreArray(iota_values(12)));
}

TEST(TensorCopy, ToCudaWithoutAGpuRaisesDeviceError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is available; tests/*_gpu_test.cpp cover it";
  EXPECT_FALSE(cuda::is_available());
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_FALSE(cuda::unavailable_reason().empty());
  Tensor x = arange_tensor({2, 2});
  EXPECT_DDP_ERROR(x.to(Device::cuda(0)), DeviceError, "cuda");
  EXPECT_DDP_ERROR(x.cuda(), DeviceError, "cuda");
  EXPECT_DDP_ERROR(x.to(Device::cuda(1), DType::f16), DeviceError, "cuda");
  EXPECT_DDP_ERROR(Tensor::zeros({2}, Device::cuda(0)), DeviceError, "cuda:0");
  EXPECT_DDP_ERROR(Tensor::from_vector<float>({1, 2}, {2}, Device::cuda(0)), DeviceError, "cuda");
  // The tensor is still usable afterwards.
  EXPECT_THAT(values(x), ElementsAre(0, 1, 2, 3));
}

TEST(TensorCopy, ItemAndToVector) {
  EXPECT_EQ(Tensor::from_vector<float>({2.5f}, {1, 1}).item<float>(), 2.5f);
  EXPECT_EQ(Tensor::scalar(2.5).item<double>(), 2.5);
  EXPECT_EQ(Tensor::scalar(3.7).item<int64_t>(), 3);  // item<T> casts like to(dtype)
  EXPECT_EQ(Tensor::scalar(7, DType::u8).item<uint8_t>(), 7);
  Tensor x = arange_tensor({3, 4});
  EXPECT_EQ(x.select(0, 2).select(0, 3).item<float>(), 11.0f);
  EXPECT_THAT(x.narrow(1, 1, 2).to_vector<float>(), ElementsAre(1, 2, 5, 6, 9, 10));
  EXPECT_THAT(x.t().to_vector<int32_t>(), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
  std::vector<Half> h = x.narrow(0, 0, 1).to_vector<Half>();
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(float(h[3]), 3.0f);
  EXPECT_TRUE(Tensor::zeros({0}).to_vector<float>().empty());
}

TEST(TensorCopy, ItemNeedsExactlyOneElement) {
  EXPECT_DDP_ERROR(Tensor::zeros({2}).item<float>(), ValueError, "item");
  EXPECT_DDP_ERROR(Tensor::zeros({2}).item<float>(), ValueError, "f32[2] on cpu");
  EXPECT_DDP_ERROR(Tensor::zeros({0}).item<float>(), ValueError, "item");
  EXPECT_DDP_ERROR(Tensor::zeros({1, 2}, DType::i64).item<int64_t>(), ValueError, "item");
}

TEST(TensorCopy, FillAndZero) {
  Tensor x = arange_tensor({3, 4});
  x.narrow(1, 1, 2).fill_(7);
  EXPECT_THAT(raw_values(x), ElementsAre(0, 7, 7, 3, 4, 7, 7, 7, 8, 7, 7, 11));
  x.select(1, 3).zero_();
  EXPECT_THAT(raw_values(x), ElementsAre(0, 7, 7, 0, 4, 7, 7, 0, 8, 7, 7, 0));
  Tensor& r = x.zero_();
  EXPECT_TRUE(r.is_same(x));
  EXPECT_THAT(raw_values(x), ElementsAreArray(std::vector<double>(12, 0)));
  for (DType dt : kAllDTypes) {
    Tensor t = Tensor::zeros({3}, dt);
    t.fill_(1);
    EXPECT_THAT(raw_values(t), ElementsAre(1, 1, 1)) << dtype_name(dt);
  }
  Tensor s = Tensor::scalar(0);
  s.fill_(3);
  EXPECT_EQ(s.item<float>(), 3.0f);
  EXPECT_DDP_ERROR(Tensor::zeros({3, 1}).expand({3, 4}).fill_(1), ValueError, "fill_");
}

// ---- in-place arithmetic -------------------------------------------------------

TEST(TensorInPlace, AddSubMulDiv) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {4});
  Tensor b = Tensor::from_vector<float>({10, 20, 30, 40}, {4});
  Tensor& r = a.add_(b);
  EXPECT_TRUE(r.is_same(a));
  EXPECT_THAT(raw_values(a), ElementsAre(11, 22, 33, 44));
  a.add_(b, -0.5);
  EXPECT_THAT(raw_values(a), ElementsAre(6, 12, 18, 24));
  a.sub_(Tensor::ones({4}));
  EXPECT_THAT(raw_values(a), ElementsAre(5, 11, 17, 23));
  a.mul_(Tensor::from_vector<float>({2, 0, -1, 1}, {4}));
  EXPECT_THAT(raw_values(a), ElementsAre(10, 0, -17, 23));
  a.mul_(2.0);
  EXPECT_THAT(raw_values(a), ElementsAre(20, 0, -34, 46));
  a.div_(Tensor::from_vector<float>({4, 1, 2, 2}, {4}));
  EXPECT_THAT(raw_values(a), ElementsAre(5, 0, -17, 23));
  // b is untouched.
  EXPECT_THAT(raw_values(b), ElementsAre(10, 20, 30, 40));
}

TEST(TensorInPlace, BroadcastScalarCastAndAlias) {
  Tensor a = Tensor::zeros({2, 3});
  a.add_(Tensor::from_vector<float>({1, 2, 3}, {3}));
  EXPECT_THAT(raw_values(a), ElementsAre(1, 2, 3, 1, 2, 3));
  a.mul_(Tensor::from_vector<float>({10, 100}, {2, 1}));
  EXPECT_THAT(raw_values(a), ElementsAre(10, 20, 30, 100, 200, 300));
  a.div_(Tensor::scalar(10));
  EXPECT_THAT(raw_values(a), ElementsAre(1, 2, 3, 10, 20, 30));
  // other of another dtype is cast to this dtype.
  a.add_(Tensor::from_vector<int64_t>({1, 1, 1}, {3}, DType::i64));
  EXPECT_THAT(raw_values(a), ElementsAre(2, 3, 4, 11, 21, 31));
  a.add_(a);  // aliasing
  EXPECT_THAT(raw_values(a), ElementsAre(4, 6, 8, 22, 42, 62));
  // Integers, with integer division.
  Tensor i = Tensor::from_vector<int32_t>({7, -7, 9}, {3}, DType::i32);
  i.div_(Tensor::from_vector<int32_t>({2, 2, 3}, {3}, DType::i32));
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_THAT(raw_values(i), ElementsAre(3, -3, 3));
  Tensor h = Tensor::ones({3}, DType::bf16);
  h.mul_(3.0);
  EXPECT_THAT(raw_values(h), ElementsAre(3, 3, 3));
}

TEST(TensorInPlace, IntoNonContiguousViews) {
  Tensor base = arange_tensor({3, 4});
  base.t().add_(Tensor::ones({4, 3}));
  EXPECT_THAT(raw_values(base), ElementsAreArray(iota_values(12, 1)));
  base.narrow(1, 0, 2).mul_(2.0);
  EXPECT_THAT(raw_values(base), ElementsAre(2, 4, 3, 4, 10, 12, 7, 8, 18, 20, 11, 12));
  base.slice(1, 1, 4, 2).div_(Tensor::full({3, 2}, 2.0));
  EXPECT_THAT(raw_values(base), ElementsAre(2, 2, 3, 2, 10, 6, 7, 4, 18, 10, 11, 6));
  base.select(0, 1).sub_(Tensor::scalar(10));
  EXPECT_THAT(raw_values(base), ElementsAre(2, 2, 3, 2, 0, -4, -3, -6, 18, 10, 11, 6));
  // The same with a transposed, broadcast operand.
  Tensor m = Tensor::zeros({2, 3});
  m.t().add_(Tensor::from_vector<float>({1, 2}, {2}));
  EXPECT_THAT(raw_values(m), ElementsAre(1, 1, 1, 2, 2, 2));
}

TEST(TensorInPlace, Errors) {
  Tensor a = Tensor::zeros({2, 3});
  EXPECT_DDP_ERROR(a.add_(Tensor::zeros({4})), ShapeError, "add_");
  EXPECT_DDP_ERROR(a.mul_(Tensor::zeros({3, 3})), ShapeError, "mul_");
  // Broadcasting only goes into other, never into this.
  EXPECT_DDP_ERROR(Tensor::zeros({3}).add_(Tensor::zeros({2, 3})), ShapeError, "add_");
  EXPECT_DDP_ERROR(Tensor::zeros({2}, DType::bool_).add_(Tensor::zeros({2}, DType::bool_)),
                   DTypeError, "add_");
  EXPECT_DDP_ERROR(Tensor::zeros({3, 1}).expand({3, 4}).add_(Tensor::ones({3, 4})), ValueError,
                   "add_");
  EXPECT_DDP_ERROR(Tensor::zeros({3, 1}).expand({3, 4}).div_(Tensor::ones({3, 4})), ValueError,
                   "div_");
}

TEST(TensorInPlace, RefusedOnATensorThatRequiresGradUnlessNoGrad) {
  Tensor w = Tensor::ones({2}, TensorOptions().requires_grad());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_DDP_ERROR(w.add_(Tensor::ones({2})), ValueError, "add_");
  EXPECT_DDP_ERROR(w.fill_(0), ValueError, "fill_");
  EXPECT_DDP_ERROR(w.copy_(Tensor::ones({2})), ValueError, "copy_");
  {
    NoGradGuard no_grad;
    w.add_(Tensor::ones({2}));
    w.mul_(3.0);
  }
  EXPECT_THAT(raw_values(w), ElementsAre(6, 6));
  // detach() shares the data and may be written.
  w.detach().fill_(1);
  EXPECT_THAT(raw_values(w), ElementsAre(1, 1));
}

}  // namespace
}  // namespace ddp
