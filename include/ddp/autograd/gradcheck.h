#pragma once
// Checks analytical gradients against central finite differences in f64.

#include <functional>
#include <string>

#include "ddp/tensor/tensor.h"

namespace ddp::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // on failure: input, element, analytical vs numerical
};

// fn maps inputs to outputs (all outputs are checked, summed with random
// weights). Inputs must be f64 CPU tensors; those with requires_grad are
// differentiated. Raises DTypeError for non-f64 inputs.
GradcheckResult gradcheck(const std::function<Tensors(const Tensors&)>& fn, const Tensors& inputs,
                          const GradcheckOptions& opts = {});

}  // namespace ddp::autograd
