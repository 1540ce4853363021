#pragma once
// The comparison the nn and optim tests use against reference values:
//   max_i |got_i − want_i| / max(floor, max_i |want_i|)
// the largest deviation relative to the tensor's scale (elementwise relative
// error is meaningless where a reference element is ~0, e.g. GELU near its
// minimum or a gradient that cancels). `floor` keeps an all-zero reference
// from dividing by zero; suites state theirs (1 for whole-model outputs of
// magnitude ~1, tiny for layer tests). A NaN counts as an infinite error and
// a shape mismatch fails the test. Any device, any floating dtype; computed
// in f64 on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ddp/tensor/tensor.h"

namespace ddp::test {

inline double scaled_error(const Tensor& got, const Tensor& want, double floor = 1.0) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return INFINITY;
  auto g = got.to(DType::f64).cpu().to_vector<double>();
  auto w = want.to(DType::f64).cpu().to_vector<double>();
  double scale = floor, err = 0.0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < g.size(); ++i) {
    const double d = std::abs(g[i] - w[i]);
    err = std::max(err, std::isnan(d) ? INFINITY : d);
  }
  return err / scale;
}

}  // namespace ddp::test
