#pragma once
// Helpers of the dense-layer tests: the PyTorch golden file and the error
// measure the comparisons use.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "ddp/autograd/grad_mode.h"
#include "ddp/io/safetensors.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"
#include "golden_file.h"

namespace ddp::test {

// tests/golden/dense_layers.safetensors (tests/golden/make_dense_golden.py),
// loaded once.
inline const nn::TensorDict& dense_golden() {
  return golden_file("dense_layers");
}

// "f32" + "linear" + "dx" -> the tensor "f32.linear.dx".
inline Tensor golden_tensor(const std::string& dtype, const std::string& case_name,
                            const std::string& tensor) {
  return dense_golden().at(dtype + "." + case_name + "." + tensor);
}

// The error measure of these tests: max_i |got_i - want_i| / max(max_i |want_i|, 1e-30),
// the largest deviation relative to the largest reference magnitude
// (elementwise relative error is meaningless where a reference element is
// ~0, e.g. GELU near its minimum or a gradient that cancels). Computed in
// f64 on the host.
inline double scaled_max_error(const Tensor& got, const Tensor& want) {
  return scaled_error(got, want, 1e-30);
}

#define EXPECT_CLOSE_TO(got, want, tol, what)                                 \
  do {                                                                        \
    ASSERT_TRUE((got).defined()) << (what) << ": undefined";                  \
    ASSERT_EQ((got).shape(), (want).shape()) << (what);                       \
    EXPECT_LE(::ddp::test::scaled_max_error((got), (want)), (tol)) << (what); \
  } while (0)

// Copies a golden value into a module's parameter (which requires grad).
inline void set_param(const Tensor& param, const Tensor& value) {
  NoGradGuard no_grad;
  const_cast<Tensor&>(param).copy_(value);
}

}  // namespace ddp::test
