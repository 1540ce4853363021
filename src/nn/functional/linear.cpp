// linear: forward and backward (see include/ddp/nn/functional/linear.h).
// A device with a linear_forward kernel (CUDA: one cuBLASLt call with the
// bias epilogue, Note [cuBLASLt linear] in linear_cuda.cpp) runs it and the
// backward recorded here; otherwise (the CPU) linear is composed from matmul
// and add, whose backward formulas autograd chains.

#include "ddp/nn/functional/linear.h"

#include "tensor/autocast_policy.h"
#include "ddp/autograd/node.h"
#include "ddp/tensor/ops.h"
#include "nn/functional/checks.h"
#include "kernel_list.h"

namespace ddp::nn::functional {

namespace {

// The one-call path of a device with a linear_forward kernel (cuBLASLt on
// CUDA) on a [rows, in] input; an undefined result when the library declines
// the case.
Tensor linear_fused(const Tensor& x, const Tensor& x2d, const Tensor& weight, const Tensor& bias) {
  // Kernels run on detached contiguous tensors; one node is recorded below
  // against the caller's tensors (Note [Kernels run on detached inputs]).
  Tensor xc = x2d.detach().contiguous();
  Tensor w = weight.detach().contiguous();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  const int64_t rows = xc.size(0), out = w.size(0);
  Tensor y = Tensor::empty({rows, out}, TensorOptions(x.dtype()).device(x.device()));
  if (!kernels::call<kernels::linear_forward>(x.device(), xc, w, b, y)) return Tensor();
  if (autograd::needs_grad({x2d, weight, bias})) {
    const bool has_bias = bias.defined();
    // dX = dY·W and dW = dYᵀ·X through the matmul op (cuBLAS), db = Σ_rows dY.
    autograd::record(
        "linear", {x2d, weight, bias}, {y}, [xc, w, has_bias](const Tensors& g) -> Tensors {
          Tensor dy = g[0].to(xc.dtype());
          return {matmul(dy, w), matmul(dy.t(), xc), has_bias ? sum(dy, {0}) : Tensor()};
        });
  }
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(amp::detail::AutocastOp::linear, {x, weight, bias},
                                      [](const Tensors& t) { return linear(t[0], t[1], t[2]); });
  const char* op = "linear";
  detail::check_floating(op, x, "input");
  detail::check_defined(op, weight, "weight");
  detail::check_like(op, weight, "weight", x);
  detail::check_like(op, bias, "bias", x);
  DDP_CHECK_T(ShapeError, weight.dim() == 2, "{}: weight must be [out, in], got {}", op,
              weight.describe());
  const int64_t in = weight.size(1), out = weight.size(0);
  DDP_CHECK_T(ShapeError, x.dim() >= 1 && x.size(-1) == in,
              "{}: expected an input [..., {}], got {}", op, in, x.describe());
  DDP_CHECK_T(ShapeError, !bias.defined() || bias.shape() == Shape{out},
              "{}: bias must be [{}], got {}", op, out, bias.describe());

  // One [rows, in] x [in, out] product (a single GEMM) rather than a batched
  // one; the result gets x's leading dims back. The reshape is recorded, so
  // gradients reach x in its own shape.
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor x2d = x.reshape({-1, in});
  if (kernels::has_kernel<kernels::linear_forward>(x.device().type)) {
    Tensor y = linear_fused(x, x2d, weight, bias);
    if (y.defined()) return y.reshape(out_shape);
  }
  Tensor y = matmul(x2d, weight.t());
  if (bias.defined()) y = y + bias;
  return y.reshape(out_shape);
}

}  // namespace ddp::nn::functional
