#pragma once
// Small helpers shared by the autograd tests.

#include <gtest/gtest.h>

#include <vector>

#include "ddp/ddp.h"

namespace ddp::test {

// An f64 CPU tensor from values; a leaf that requires grad unless told.
inline Tensor f64(const std::vector<double>& v, const Shape& shape, bool requires_grad = true) {
  return Tensor::from_vector<double>(v, shape,
                                     TensorOptions(kFloat64).requires_grad(requires_grad));
}

inline void expect_values(const Tensor& t, const std::vector<double>& expected,
                          double tol = 1e-12) {
  ASSERT_TRUE(t.defined());
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "element " << i;
}

}  // namespace ddp::test
