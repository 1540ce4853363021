// Tests of ddp/core/dtype.h and ddp/core/dispatch.h: sizes, names, aliases,
// promotion and the dtype -> C++ type machinery.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <set>
#include <string>
#include <type_traits>

#include "ddp/core/dispatch.h"
#include "ddp/core/dtype.h"
#include "ddp/core/error.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

TEST(DType, ElementSizes) {
  EXPECT_EQ(element_size(DType::f32), 4u);
  EXPECT_EQ(element_size(DType::f64), 8u);
  EXPECT_EQ(element_size(DType::f16), 2u);
  EXPECT_EQ(element_size(DType::bf16), 2u);
  EXPECT_EQ(element_size(DType::i32), 4u);
  EXPECT_EQ(element_size(DType::i64), 8u);
  EXPECT_EQ(element_size(DType::u8), 1u);
  EXPECT_EQ(element_size(DType::bool_), 1u);
  static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);
}

TEST(DType, AllDTypesListsEachOnce) {
  std::set<int> seen;
  for (DType t : kAllDTypes) seen.insert(int(t));
  EXPECT_EQ(seen.size(), size_t(kNumDTypes));
  EXPECT_EQ(std::size(kAllDTypes), size_t(kNumDTypes));
}

TEST(DType, Names) {
  EXPECT_STREQ(dtype_name(DType::f32), "f32");
  EXPECT_STREQ(dtype_name(DType::f64), "f64");
  EXPECT_STREQ(dtype_name(DType::f16), "f16");
  EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
  EXPECT_STREQ(dtype_name(DType::i32), "i32");
  EXPECT_STREQ(dtype_name(DType::i64), "i64");
  EXPECT_STREQ(dtype_name(DType::u8), "u8");
  EXPECT_STREQ(dtype_name(DType::bool_), "bool");
}

TEST(DType, FromNameRoundTripsEveryName) {
  for (DType t : kAllDTypes) EXPECT_EQ(dtype_from_name(dtype_name(t)), t) << dtype_name(t);
}

TEST(DType, FromNameAliases) {
  EXPECT_EQ(dtype_from_name("float32"), DType::f32);
  EXPECT_EQ(dtype_from_name("float"), DType::f32);
  EXPECT_EQ(dtype_from_name("float64"), DType::f64);
  EXPECT_EQ(dtype_from_name("double"), DType::f64);
  EXPECT_EQ(dtype_from_name("float16"), DType::f16);
  EXPECT_EQ(dtype_from_name("half"), DType::f16);
  EXPECT_EQ(dtype_from_name("bfloat16"), DType::bf16);
  EXPECT_EQ(dtype_from_name("int32"), DType::i32);
  EXPECT_EQ(dtype_from_name("int64"), DType::i64);
  EXPECT_EQ(dtype_from_name("uint8"), DType::u8);
  EXPECT_EQ(dtype_from_name("bool"), DType::bool_);
}

TEST(DType, FromNameRejectsUnknownNames) {
  for (const char* bad : {"float8", "F32", "", "int", "f32 ", "complex64"}) {
    try {
      dtype_from_name(bad);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("'") + bad + "'"));
      EXPECT_THAT(e.what(), HasSubstr("dtype"));
      EXPECT_THAT(e.what(), HasSubstr("dtype.cpp:"));
    }
  }
}

TEST(DType, IsFloatingAndIntegral) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    EXPECT_TRUE(is_floating(t)) << dtype_name(t);
    EXPECT_FALSE(is_integral(t)) << dtype_name(t);
  }
  for (DType t : {DType::i32, DType::i64, DType::u8, DType::bool_}) {
    EXPECT_FALSE(is_floating(t)) << dtype_name(t);
    EXPECT_TRUE(is_integral(t)) << dtype_name(t);
  }
}

// The whole table, row a, column b, in the order f32 f64 f16 bf16 i32 i64 u8
// bool. Generated with Debian's python3-torch 1.13.1:
//   for a in ts: print([torch.promote_types(a, b) for b in ts])
TEST(DType, PromoteTypesMatchesTorchTable) {
  constexpr DType kOrder[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                              DType::i32, DType::i64, DType::u8,  DType::bool_};
  const DType kExpected[8][8] = {
      {DType::f32, DType::f64, DType::f32, DType::f32, DType::f32, DType::f32, DType::f32, DType::f32},
      {DType::f64, DType::f64, DType::f64, DType::f64, DType::f64, DType::f64, DType::f64, DType::f64},
      {DType::f32, DType::f64, DType::f16, DType::f32, DType::f16, DType::f16, DType::f16, DType::f16},
      {DType::f32, DType::f64, DType::f32, DType::bf16, DType::bf16, DType::bf16, DType::bf16, DType::bf16},
      {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::i32, DType::i32},
      {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i64, DType::i64, DType::i64},
      {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::u8},
      {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::bool_},
  };
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      EXPECT_EQ(promote_types(kOrder[i], kOrder[j]), kExpected[i][j])
          << dtype_name(kOrder[i]) << " with " << dtype_name(kOrder[j]) << " gave "
          << dtype_name(promote_types(kOrder[i], kOrder[j]));
}

TEST(DType, PromoteTypesIsSymmetric) {
  for (DType a : kAllDTypes)
    for (DType b : kAllDTypes) EXPECT_EQ(promote_types(a, b), promote_types(b, a));
}

TEST(DType, TraitsAndComputeTypes) {
  static_assert(std::is_same_v<dtype_traits<DType::f32>::type, float>);
  static_assert(std::is_same_v<dtype_traits<DType::f16>::type, Half>);
  static_assert(std::is_same_v<dtype_traits<DType::bf16>::type, BFloat16>);
  static_assert(std::is_same_v<dtype_traits<DType::bool_>::type, bool>);
  static_assert(std::is_same_v<dtype_traits<DType::u8>::type, uint8_t>);
  static_assert(dtype_of<double>() == DType::f64);
  static_assert(dtype_of<int32_t>() == DType::i32);
  static_assert(dtype_of<int64_t>() == DType::i64);
  static_assert(dtype_of<BFloat16>() == DType::bf16);
  // See Note [Compute type].
  static_assert(std::is_same_v<compute_t<Half>, float>);
  static_assert(std::is_same_v<compute_t<BFloat16>, float>);
  static_assert(std::is_same_v<compute_t<float>, float>);
  static_assert(std::is_same_v<compute_t<double>, double>);
  static_assert(std::is_same_v<compute_t<int32_t>, int64_t>);
  static_assert(std::is_same_v<compute_t<uint8_t>, int64_t>);
  static_assert(std::is_same_v<compute_t<bool>, int64_t>);
  SUCCEED();
}

TEST(Dispatch, AllVisitsTheMatchingType) {
  for (DType t : kAllDTypes) {
    DType seen = DType::f32;
    size_t size = 0;
    dispatch_all(t, "test_op", [&]<class T>() {
      seen = dtype_of<T>();
      size = sizeof(T);
    });
    EXPECT_EQ(seen, t);
    EXPECT_EQ(size, element_size(t));
  }
}

TEST(Dispatch, FloatingRejectsIntegersNamingTheOp) {
  int calls = 0;
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16})
    dispatch_floating(t, "my_op", [&]<class T>() { ++calls; });
  EXPECT_EQ(calls, 4);
  for (DType t : {DType::i32, DType::i64, DType::u8, DType::bool_}) {
    try {
      dispatch_floating(t, "my_op", [&]<class T>() { ++calls; });
      ADD_FAILURE() << "no error for " << dtype_name(t);
    } catch (const DTypeError& e) {
      EXPECT_THAT(e.what(), HasSubstr("my_op"));
      EXPECT_THAT(e.what(), HasSubstr(dtype_name(t)));
    }
  }
  EXPECT_EQ(calls, 4);
}

TEST(Dispatch, NumericRejectsBoolAndIndexWantsIntegers) {
  EXPECT_THROW(dispatch_numeric(DType::bool_, "op", [&]<class T>() {}), DTypeError);
  EXPECT_NO_THROW(dispatch_numeric(DType::u8, "op", [&]<class T>() {}));
  DType seen = DType::f32;
  dispatch_index(DType::i32, "op", [&]<class T>() { seen = dtype_of<T>(); });
  EXPECT_EQ(seen, DType::i32);
  dispatch_index(DType::i64, "op", [&]<class T>() { seen = dtype_of<T>(); });
  EXPECT_EQ(seen, DType::i64);
  try {
    dispatch_index(DType::f32, "index_select", [&]<class T>() {});
    ADD_FAILURE() << "no error";
  } catch (const DTypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("index_select"));
    EXPECT_THAT(e.what(), HasSubstr("f32"));
  }
}

}  // namespace
}  // namespace ddp
