// linear and linear_gelu: forward and backward (see
// include/ddp/nn/functional/linear.h). A device with a linear_forward kernel
// (CUDA: one cuBLASLt call with the bias epilogue, Note [cuBLASLt linear] in
// linear_cuda.cpp) runs it and the backward recorded here; otherwise (the
// CPU) linear is composed from matmul and add, whose backward formulas
// autograd chains.
//
// Note [linear_gelu]
// The GPT MLP's first layer is gelu(linear(x), "tanh"). Composed, that is a
// GEMM, a bias pass (or the bias epilogue) and a GELU pass over the
// [rows, 4·width] activation, and the backward adds a GELU-derivative pass
// and a row-sum pass for db. Fused on CUDA:
// - forward: one GEMM with the GELU_AUX_BIAS epilogue writes y = gelu(h) and
//   h = x·wᵀ + b (saved for the backward, as the composed path saves gelu's
//   input);
// - backward: dh = gelu'(h)·dy in one elementwise kernel (the GELU's own
//   derivative, as the unary op's backward), dX = dh·W (cuBLAS), and
//   dW = dhᵀ·X with db = Σ_rows dh in one GEMM (BGRADB).
// The CPU, and cases cuBLASLt declines (out not a multiple of 8, f64),
// compose linear and gelu("tanh"), so the values agree with the composition
// up to rounding. Like linear's fused path and the elementwise ops, the
// recorded backward gives first derivatives (it saves detached tensors and
// runs kernels). Autocast casts linear_gelu's
// inputs by linear's policy entry: one GEMM with an epilogue, the same cost
// as linear's.

#include "ddp/nn/functional/linear.h"

#include "ddp/autograd/node.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/ops.h"
#include "kernel_list.h"
#include "nn/functional/checks.h"
#include "tensor/autocast_policy.h"

namespace ddp::nn::functional {

namespace {

// The argument checks shared by linear and linear_gelu (`op` names the op).
void check_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
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
}

// dW = dyᵀ·x and db = Σ_rows dy (when has_bias): one GEMM with the
// bias-gradient epilogue where the device has one (and takes the case),
// else matmul and sum.
std::pair<Tensor, Tensor> weight_grads(const Tensor& dy, const Tensor& x, bool has_bias) {
  if (kernels::has_kernel<kernels::linear_backward_weight>(x.device().type)) {
    const TensorOptions o = TensorOptions(x.dtype()).device(x.device());
    Tensor dyc = dy.contiguous();
    Tensor dw = Tensor::empty({dy.size(1), x.size(1)}, o);
    Tensor db = has_bias ? Tensor::empty({dy.size(1)}, o) : Tensor();
    if (kernels::call<kernels::linear_backward_weight>(x.device(), dyc, x, dw, db)) return {dw, db};
  }
  return {matmul(dy.t(), x), has_bias ? sum(dy, {0}) : Tensor()};
}

// The one-call path of a device with a linear_forward kernel (cuBLASLt on
// CUDA) on a [rows, in] input; an undefined result when the library declines
// the case.
Tensor linear_fused(const Tensor& x2d, const Tensor& weight, const Tensor& bias) {
  // Kernels run on detached contiguous tensors; one node is recorded below
  // against the caller's tensors (Note [Kernels run on detached inputs]).
  Tensor xc = x2d.detach().contiguous();
  Tensor w = weight.detach().contiguous();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  const int64_t rows = xc.size(0), out = w.size(0);
  Tensor y = Tensor::empty({rows, out}, TensorOptions(xc.dtype()).device(xc.device()));
  if (!kernels::call<kernels::linear_forward>(xc.device(), xc, w, b, y)) return Tensor();
  if (autograd::needs_grad({x2d, weight, bias})) {
    const bool has_bias = bias.defined();
    // dX = dY·W through the matmul op (cuBLAS); dW and db in one GEMM.
    autograd::record(
        "linear", {x2d, weight, bias}, {y}, [xc, w, has_bias](const Tensors& g) -> Tensors {
          Tensor dy = g[0].to(xc.dtype());
          auto [dw, db] = weight_grads(dy, xc, has_bias);
          return {matmul(dy, w), dw, db};
        });
  }
  return y;
}

// linear_gelu's fused path (Note [linear_gelu]); undefined when declined.
Tensor linear_gelu_fused(const Tensor& x2d, const Tensor& weight, const Tensor& bias) {
  Tensor xc = x2d.detach().contiguous();
  Tensor w = weight.detach().contiguous();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  const int64_t rows = xc.size(0), out = w.size(0);
  const TensorOptions o = TensorOptions(xc.dtype()).device(xc.device());
  Tensor y = Tensor::empty({rows, out}, o);
  Tensor pre = Tensor::empty({rows, out}, o);
  if (!kernels::call<kernels::linear_gelu_forward>(xc.device(), xc, w, b, y, pre)) return Tensor();
  if (autograd::needs_grad({x2d, weight, bias})) {
    const bool has_bias = bias.defined();
    autograd::record("linear_gelu", {x2d, weight, bias}, {y},
                     [xc, w, pre, has_bias](const Tensors& g) -> Tensors {
                       Tensor dy = g[0].to(xc.dtype());
                       // dh = gelu'(h)·dy with the GELU's own derivative kernel.
                       Tensor dh = Tensor::empty(pre.shape(),
                                                 TensorOptions(pre.dtype()).device(pre.device()));
                       backend_for(pre.device())
                           .unary_backward(UnaryOp::gelu, pre, pre, dy.contiguous(), dh);
                       auto [dw, db] = weight_grads(dh, xc, has_bias);
                       return {matmul(dh, w), dw, db};
                     });
  }
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(amp::detail::AutocastOp::linear, {x, weight, bias},
                                      [](const Tensors& t) { return linear(t[0], t[1], t[2]); });
  check_linear("linear", x, weight, bias);
  const int64_t in = weight.size(1), out = weight.size(0);

  // One [rows, in] x [in, out] product (a single GEMM) rather than a batched
  // one; the result gets x's leading dims back. The reshape is recorded, so
  // gradients reach x in its own shape.
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor x2d = x.reshape({-1, in});
  if (kernels::has_kernel<kernels::linear_forward>(x.device().type)) {
    Tensor y = linear_fused(x2d, weight, bias);
    if (y.defined()) return y.reshape(out_shape);
  }
  Tensor y = matmul(x2d, weight.t());
  if (bias.defined()) y = y + bias;
  return y.reshape(out_shape);
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  // Cast by linear's entry of the policy table (Note [linear_gelu]).
  if (amp::detail::autocast_active())
    return amp::detail::autocast_call(amp::detail::AutocastOp::linear, {x, weight, bias},
                                      [](const Tensors& t) {
                                        return linear_gelu(t[0], t[1], t[2]);
                                      });
  check_linear("linear_gelu", x, weight, bias);
  const int64_t in = weight.size(1), out = weight.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = out;
  if (kernels::has_kernel<kernels::linear_gelu_forward>(x.device().type)) {
    Tensor y = linear_gelu_fused(x.reshape({-1, in}), weight, bias);
    if (y.defined()) return y.reshape(out_shape);
  }
  return ddp::gelu(linear(x, weight, bias));
}

LinearCacheStats linear_cache_stats(DeviceType device) {
  if (!kernels::has_kernel<kernels::linear_cache_stats>(device)) return {};
  const kernels::PlanCacheStats s = kernels::find_kernel<kernels::linear_cache_stats>(device)();
  return {s.entries, s.hits, s.misses};
}

}  // namespace ddp::nn::functional
