#pragma once
// Helpers shared by the Tensor tests (tensor_test.cpp, tensor_copy_test.cpp).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <regex>
#include <type_traits>
#include <typeinfo>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "ddp/core/dispatch.h"
#include "ddp/tensor/tensor.h"

namespace ddp::tensor_test {

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

inline void expect_error_message(const std::string& msg, const std::string& substr) {
  EXPECT_THAT(msg, HasSubstr(substr));
  EXPECT_TRUE(std::regex_search(msg, std::regex(R"(\([A-Za-z0-9_]+\.(cpp|h|cu):[0-9]+\)$)")))
      << "no (file:line) at the end of: " << msg;
}

// Reads a contiguous tensor's elements through data<T>() (not through to()),
// converted to double, so conversions can be checked independently.
inline std::vector<double> raw_values(const Tensor& t) {
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

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

inline std::vector<double> iota_values(int n, double start = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// 0..n-1 in the given shape (f32 unless told).
inline Tensor arange_tensor(const Shape& shape, DType dtype = DType::f32) {
  return Tensor::from_vector<double>(iota_values(int(shape_numel(shape))), shape, dtype);
}

// ---- factories ----------------------------------------------------------------


}  // namespace ddp::tensor_test
