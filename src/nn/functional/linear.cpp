// linear, linear_gelu and linear_gelu_linear: forward and backward (see
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
//   dW = dhᵀ·X with db = Σ_rows dh in one GEMM (BGRADB). When the next
//   layer is a linear too (GPT's c_proj), linear_gelu_linear folds gelu'
//   and db into that layer's backward GEMM instead (Note
//   [linear_gelu_linear]).
// The CPU, and cases cuBLASLt declines (out not a multiple of 8, f64),
// compose linear and gelu("tanh"), so the values agree with the composition
// up to rounding. Like linear's fused path and the elementwise ops, the
// recorded backward gives first derivatives (it saves detached tensors and
// runs kernels). Autocast casts linear_gelu's
// inputs by linear's policy entry: one GEMM with an epilogue, the same cost
// as linear's.
//
// Note [linear_gelu_linear]
// linear_gelu's backward cannot use cuBLASLt's DGELU_BGRAD epilogue: that
// epilogue multiplies a GEMM's result by gelu'(h), and the GEMM producing
// dL/d(gelu output) is the backward-data GEMM of the *next* layer (Note
// [cuBLASLt linear]). linear_gelu_linear(x, w1, b1, w2, b2) =
// linear(linear_gelu(x, w1, b1), w2, b2), the whole GPT MLP before its
// dropout, holds both layers in one autograd node so that GEMM is its own:
// - forward: linear_gelu's fused GEMM (saving h) and linear's;
// - backward from dz: dW2 and db2 in one BGRADB GEMM; then ONE GEMM with
//   DGELU_BGRAD gives dh = (dz·W2) ∘ gelu'(h) and db1 = Σ_rows dh; then
//   dW1 = dhᵀ·x (plain, or BGRADB when DGELU_BGRAD was declined) and
//   dX = dh·W1. The GELU-derivative pass over [rows, hid] and its read of
//   dL/dy1 disappear, and dL/dy1 is never materialised.
// The CPU, and any case the fused forward declines (hid % 8 != 0, f64),
// is the composition linear(linear_gelu(...)), so its values and gradients
// are exactly the composition's. When only the DGELU GEMM is declined, the
// backward composes that step (matmul, the GELU's derivative kernel, BGRADB).

#include "ddp/nn/functional/linear.h"

#include <tuple>

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

// linear_gelu_linear's fused path (Note [linear_gelu_linear]) on a
// [rows, in] input; undefined when the first layer's fused GEMM is declined.
Tensor linear_gelu_linear_fused(const Tensor& x2d, const Tensor& w1, const Tensor& b1,
                                const Tensor& w2, const Tensor& b2) {
  Tensor xc = x2d.detach().contiguous();
  Tensor w1c = w1.detach().contiguous(), w2c = w2.detach().contiguous();
  Tensor b1c = b1.defined() ? b1.detach().contiguous() : Tensor();
  Tensor b2c = b2.defined() ? b2.detach().contiguous() : Tensor();
  const int64_t rows = xc.size(0), hid = w1c.size(0);
  const TensorOptions o = TensorOptions(xc.dtype()).device(xc.device());
  Tensor y1 = Tensor::empty({rows, hid}, o);
  Tensor pre = Tensor::empty({rows, hid}, o);
  if (!kernels::call<kernels::linear_gelu_forward>(xc.device(), xc, w1c, b1c, y1, pre))
    return Tensor();
  // Detached inputs: linear records nothing; it runs its own fused GEMM or composes.
  Tensor z = linear(y1, w2c, b2c);
  if (autograd::needs_grad({x2d, w1, b1, w2, b2})) {
    const bool has_b1 = b1.defined(), has_b2 = b2.defined();
    autograd::record(
        "linear_gelu_linear", {x2d, w1, b1, w2, b2}, {z},
        [xc, w1c, w2c, y1, pre, has_b1, has_b2](const Tensors& g) -> Tensors {
          Tensor dz = g[0].to(xc.dtype()).contiguous();
          auto [dw2, db2] = weight_grads(dz, y1, has_b2);
          const TensorOptions opt = TensorOptions(pre.dtype()).device(pre.device());
          Tensor dh = Tensor::empty(pre.shape(), opt);
          Tensor db1 = has_b1 ? Tensor::empty({pre.size(1)}, opt) : Tensor();
          const bool fused = kernels::has_kernel<kernels::linear_dgelu_bgrad>(xc.device().type) &&
                             kernels::call<kernels::linear_dgelu_bgrad>(xc.device(), dz, w2c, pre,
                                                                        dh, db1);
          Tensor dw1;
          if (fused) {
            dw1 = weight_grads(dh, xc, false).first;
          } else {  // compose: dy1 = dz·W2, then the GELU's derivative kernel
            Tensor dy1 = matmul(dz, w2c).contiguous();
            backend_for(pre.device()).unary_backward(UnaryOp::gelu, pre, pre, dy1, dh);
            std::tie(dw1, db1) = weight_grads(dh, xc, has_b1);
          }
          return {matmul(dh, w1c), dw1, db1, dw2, db2};
        });
  }
  return z;
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

Tensor linear_gelu_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                          const Tensor& b2) {
  // Two GEMMs with epilogues: cast by linear's entry (Note [linear_gelu_linear]).
  if (amp::detail::autocast_active())
    return amp::detail::autocast_call(amp::detail::AutocastOp::linear, {x, w1, b1, w2, b2},
                                      [](const Tensors& t) {
                                        return linear_gelu_linear(t[0], t[1], t[2], t[3], t[4]);
                                      });
  constexpr const char* op = "linear_gelu_linear";
  check_linear(op, x, w1, b1);
  detail::check_defined(op, w2, "w2");
  detail::check_like(op, w2, "w2", x);
  detail::check_like(op, b2, "b2", x);
  const int64_t in = w1.size(1), hid = w1.size(0);
  DDP_CHECK_T(ShapeError, w2.dim() == 2 && w2.size(1) == hid,
              "{}: w2 must be [out, {}] (w1 is {}), got {}", op, hid, w1.describe(),
              w2.describe());
  const int64_t out = w2.size(0);
  DDP_CHECK_T(ShapeError, !b2.defined() || b2.shape() == Shape{out}, "{}: b2 must be [{}], got {}",
              op, out, b2.describe());
  Shape out_shape = x.shape();
  out_shape.back() = out;
  if (kernels::has_kernel<kernels::linear_gelu_forward>(x.device().type)) {
    Tensor z = linear_gelu_linear_fused(x.reshape({-1, in}), w1, b1, w2, b2);
    if (z.defined()) return z.reshape(out_shape);
  }
  return linear(linear_gelu(x, w1, b1), w2, b2);
}

LinearCacheStats linear_cache_stats(DeviceType device) {
  if (!kernels::has_kernel<kernels::linear_cache_stats>(device)) return {};
  const kernels::PlanCacheStats s = kernels::find_kernel<kernels::linear_cache_stats>(device)();
  return {s.entries, s.hits, s.misses};
}

}  // namespace ddp::nn::functional
