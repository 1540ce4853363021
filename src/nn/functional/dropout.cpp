// dropout: y = x · mask · 1/(1-p) with mask = (u >= p), u uniform in [0, 1)
// from Philox. Composed from tensor ops, so autograd gives dx = dy · mask /
// (1-p); the mask is a constant of the graph.

#include "ddp/nn/functional/dropout.h"

#include "ddp/autograd/grad_mode.h"
#include "ddp/tensor/ops.h"
#include "nn/functional/checks.h"

namespace ddp::nn::functional {

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  const char* op = "dropout";
  detail::check_floating(op, x, "input");
  DDP_CHECK(p >= 0.0 && p <= 1.0, "{}: p must be in [0, 1], got {}", op, p);
  if (!training || p == 0.0) return x;
  Tensor scaled_mask;
  {
    NoGradGuard no_grad;
    const TensorOptions opts = TensorOptions(x.dtype()).device(x.device());
    // p = 1 drops everything (torch returns zeros, not NaN from 1/0).
    const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
    scaled_mask = ge(rand(x.shape(), opts, gen), p).to(x.dtype()) * scale;
  }
  return x * scaled_mask;
}

}  // namespace ddp::nn::functional
