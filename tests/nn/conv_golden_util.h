#pragma once
// Access to tests/golden/conv_layers.safetensors (written by
// tests/golden/make_conv_golden.py from PyTorch) and the comparison the
// convolution-family tests use.
//
// Tolerance: rel_error(a, b) = max_i |a_i − b_i| / max(max_i |b_i|, 1e-6),
// the largest error relative to the reference's largest magnitude (an
// element-wise relative error would blow up on the reference's near-zero
// elements, which sums of products of random numbers produce). f32 CPU
// results must have rel_error ≤ 1e-4 against PyTorch's (computed in f64).

#include <algorithm>
#include <cmath>
#include <string>

#include "ddp/io/safetensors.h"
#include "nn/scaled_error.h"
#include "nn/nn_test_util.h"
#include "golden_file.h"

namespace ddp::test {

inline const nn::TensorDict& conv_golden() {
  return golden_file("conv_layers");
}

// The golden tensor "<name>" (f32, CPU); fails the test when missing.
inline Tensor golden(const std::string& name) {
  const nn::TensorDict& d = conv_golden();
  EXPECT_TRUE(d.contains(name)) << "no tensor " << name << " in conv_layers.safetensors";
  return d.contains(name) ? d.at(name) : Tensor();
}

// See the tolerance above: scaled_error with a floor of 1e-6.
inline double rel_error(const Tensor& a, const Tensor& b) { return scaled_error(a, b, 1e-6); }

#define EXPECT_REL_NEAR(a, b, tol) \
  EXPECT_LE(::ddp::test::rel_error((a), (b)), (tol)) << #a " vs " #b

// Copies golden values into a module's parameter or buffer without recording.
inline void set_value(const Tensor& dst, const Tensor& src) {
  autograd::NoGradGuard no_grad;
  Tensor(dst).copy_(src);
}

}  // namespace ddp::test
