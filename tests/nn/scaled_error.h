#pragma once
// The comparison the nn tests use against reference values:
//   max |a − e| / max(1, max |e|)
// i.e. errors relative to the tensor's scale, so that elements near zero in
// an output of magnitude ~1 are not held to a relative bound that f32 cannot
// meet. Works for tensors on any device and of any floating dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ddp/tensor/tensor.h"

namespace ddp::test {

inline double scaled_error(const Tensor& a, const Tensor& e) {
  EXPECT_EQ(a.shape(), e.shape());
  auto av = a.to(DType::f64).cpu().to_vector<double>();
  auto ev = e.to(DType::f64).cpu().to_vector<double>();
  double scale = 1.0, err = 0.0;
  for (double x : ev) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < std::min(av.size(), ev.size()); ++i)
    err = std::max(err, std::abs(av[i] - ev[i]));
  return err / scale;
}

}  // namespace ddp::test
