// Elementwise ops: unary, binary and comparisons generated from op_list.h,
// plus where, masked_fill and pow. Each primitive's backward sits right
// after its forward. See Note [Kernels run on detached inputs] in ops_util.h.

#include <cmath>

#include "tensor/autocast_policy.h"
#include "ddp/autograd/node.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/ops.h"
#include "ops/ops_util.h"

namespace ddp {

using namespace ops_detail;

namespace {

constexpr bool kUnaryFloatOnly[] = {
#define DDP_FLOAT_ONLY(name, Fn, float_only) float_only,
    DDP_FOR_EACH_UNARY_OP(DDP_FLOAT_ONLY)
#undef DDP_FLOAT_ONLY
};

// Note [Output-only derivatives]
// These ops' derivatives read only their output (functors.h; relu's reads
// x > 0, which is y > 0), so their backward keeps the output alone and hands
// it to the kernel in the input's place. A relu after a BatchNorm thus no longer keeps the BatchNorm's
// output alive until the backward: one activation less per relu (the
// output is kept anyway, as the next op's input).
constexpr bool output_only_derivative(UnaryOp op) {
  switch (op) {
    case UnaryOp::relu:
    case UnaryOp::exp:
    case UnaryOp::tanh:
    case UnaryOp::sigmoid:
    case UnaryOp::sqrt:
    case UnaryOp::rsqrt:
    case UnaryOp::neg:
      return true;
    default:
      return false;
  }
}

// The mask as 0/1 in dtype, for the gradients of maximum/minimum.
Tensor mask_as(const Tensor& mask, DType dtype) { return mask.to(dtype); }

}  // namespace

// ---- unary ----------------------------------------------------------------

Tensor unary(UnaryOp op, const Tensor& x) {
  // See Note [Autocast policy]: only the unary ops the table lists.
  if (const int ac = amp::detail::kUnaryAutocastOp[int(op)];
      ac >= 0 && amp::detail::autocast_active())
    return amp::detail::autocast_call(amp::detail::AutocastOp(ac), {x},
                                      [op](const Tensors& t) { return unary(op, t[0]); });
  const char* name = op_name(op);
  check_defined(name, x, "x");
  DType dt = x.dtype();
  if (!is_floating(dt)) {
    // float_only ops compute integer (and bool) inputs in f32, like torch.exp.
    if (kUnaryFloatOnly[int(op)]) {
      dt = DType::f32;
    } else {
      DDP_CHECK_T(DTypeError, dt != DType::bool_, "{}: bool tensors are not supported, got {}",
                  name, x.describe());
    }
  }
  Tensor xin = cast_to(x.detach(), dt);
  Tensor out = empty_out(name, x.shape(), dt, x.device(), {xin});
  backend_for(x.device()).unary(op, xin, out);

  // Backward: dx = f'(x) * dy from the functor's own derivative.
  if (autograd::needs_grad({x})) {
    Tensor ys = out.detach();
    Tensor xs = output_only_derivative(op) ? Tensor() : xin;
    autograd::record(name, {x}, {out}, [op, xs, ys](const Tensors& g) -> Tensors {
      const Tensor& xk = xs.defined() ? xs : ys;  // Note [Output-only derivatives]
      Tensor dy = cast_to(g[0], ys.dtype());
      Tensor dx = empty_in_layout_of({dy, ys}, ys.shape(), options(ys.dtype(), ys.device()));
      backend_for(ys.device()).unary_backward(op, xk, ys, dy, dx);
      return {dx};
    });
  }
  return out;
}

#define DDP_DEFINE_UNARY(name, ...) \
  Tensor name(const Tensor& x) { return unary(UnaryOp::name, x); }
DDP_FOR_EACH_UNARY_OP(DDP_DEFINE_UNARY)
#undef DDP_DEFINE_UNARY

// ---- binary ---------------------------------------------------------------

// Note [True division]
// div follows torch's true division: integer (and bool) operands are
// promoted to f32 first, so div(i32, i32) is f32, never a truncated integer.
// The other binary ops keep the promoted integer dtype; bool arithmetic is a
// DTypeError (backends do not implement it).

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op);
  check_defined(name, a, "a");
  check_defined(name, b, "b");
  check_same_device(name, a, b);
  Shape shape = broadcast_shapes(name, a, b);
  DType dt = promote_types(a.dtype(), b.dtype());
  if (op == BinaryOp::div && !is_floating(dt)) dt = DType::f32;  // Note [True division]
  DDP_CHECK_T(DTypeError, dt != DType::bool_, "{}: arithmetic on bool tensors is not supported: {} and {}",
              name, a.describe(), b.describe());
  Tensor ap = cast_to(a.detach(), dt), bp = cast_to(b.detach(), dt);
  Tensor out = empty_out(name, shape, dt, a.device(), {ap, bp});
  backend_for(a.device()).binary(op, expand_to(ap, shape), expand_to(bp, shape), out);

  if (autograd::needs_grad({a, b})) {
    bool need_a = autograd::needs_grad({a}), need_b = autograd::needs_grad({b});
    Shape sa = a.shape(), sb = b.shape();
    DType da = a.dtype(), db = b.dtype();
    // add and sub need no operand values: saving none keeps activations free.
    bool linear = op == BinaryOp::add || op == BinaryOp::sub;
    Tensor as = linear ? Tensor() : ap, bs = linear ? Tensor() : bp;
    autograd::record(name, {a, b}, {out}, [=](const Tensors& grads) -> Tensors {
      const Tensor &g = grads[0], &ap = as, &bp = bs;
      Tensor ga, gb;  // in the promoted dtype and the broadcast shape
      switch (op) {
        case BinaryOp::add:
          ga = g;
          gb = g;
          break;
        case BinaryOp::sub:
          ga = g;
          if (need_b) gb = neg(g);
          break;
        case BinaryOp::mul:
          if (need_a) ga = mul(g, bp);
          if (need_b) gb = mul(g, ap);
          break;
        case BinaryOp::div:
          if (need_a) ga = div(g, bp);
          if (need_b) gb = neg(div(mul(g, ap), mul(bp, bp)));
          break;
        case BinaryOp::maximum:
        case BinaryOp::minimum: {
          // The winner takes the gradient; ties split it evenly, like torch.
          bool is_max = op == BinaryOp::maximum;
          Tensor half_tie = mul(mask_as(eq(ap, bp), dt), 0.5);
          if (need_a) ga = mul(g, add(mask_as(is_max ? gt(ap, bp) : lt(ap, bp), dt), half_tie));
          if (need_b) gb = mul(g, add(mask_as(is_max ? lt(ap, bp) : gt(ap, bp), dt), half_tie));
          break;
        }
      }
      Tensors out_grads(2);
      if (need_a) out_grads[0] = grad_as(sum_to(ga, sa), da);
      if (need_b) out_grads[1] = grad_as(sum_to(gb, sb), db);
      return out_grads;
    });
  }
  return out;
}

namespace {
Tensor binary_scalar(BinaryOp op, const Tensor& a, double b) {
  check_defined(op_name(op), a, "a");
  return binary(op, a, scalar_tensor(b, scalar_operand_dtype(a.dtype(), b), a.device()));
}
}  // namespace

#define DDP_DEFINE_BINARY(name, ...)                                                      \
  Tensor name(const Tensor& a, const Tensor& b) { return binary(BinaryOp::name, a, b); } \
  Tensor name(const Tensor& a, double b) { return binary_scalar(BinaryOp::name, a, b); }
DDP_FOR_EACH_BINARY_OP(DDP_DEFINE_BINARY)
#undef DDP_DEFINE_BINARY

// ---- comparisons (no gradient) ----------------------------------------------

namespace {
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op);
  check_defined(name, a, "a");
  check_defined(name, b, "b");
  check_same_device(name, a, b);
  Shape shape = broadcast_shapes(name, a, b);
  DType dt = promote_types(a.dtype(), b.dtype());
  Tensor ap = cast_to(a.detach(), dt), bp = cast_to(b.detach(), dt);
  Tensor out = empty_out(name, shape, DType::bool_, a.device(), {ap, bp});
  backend_for(a.device()).compare(op, expand_to(ap, shape), expand_to(bp, shape), out);
  return out;
}
Tensor compare_scalar(CompareOp op, const Tensor& a, double b) {
  check_defined(op_name(op), a, "a");
  return compare(op, a, scalar_tensor(b, scalar_operand_dtype(a.dtype(), b), a.device()));
}
}  // namespace

#define DDP_DEFINE_COMPARE(name, ...)                                                      \
  Tensor name(const Tensor& a, const Tensor& b) { return compare(CompareOp::name, a, b); } \
  Tensor name(const Tensor& a, double b) { return compare_scalar(CompareOp::name, a, b); }
DDP_FOR_EACH_COMPARE_OP(DDP_DEFINE_COMPARE)
#undef DDP_DEFINE_COMPARE

// ---- where / masked_fill ------------------------------------------------------

namespace {
void check_mask(const char* op, const Tensor& mask) {
  DDP_CHECK_T(DTypeError, mask.dtype() == DType::bool_, "{}: the condition must be bool, got {}",
              op, mask.describe());
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const char* name = "where";
  check_defined(name, cond, "cond");
  check_defined(name, a, "a");
  check_defined(name, b, "b");
  check_mask(name, cond);
  check_same_device(name, {cond, a, b});
  bool ok = false;
  Shape shape = broadcast_shape(broadcast_shapes(name, cond, a), b.shape(), &ok);
  DDP_CHECK_T(ShapeError, ok, "where: shapes do not broadcast: cond {}, a {}, b {}",
              cond.describe(), a.describe(), b.describe());
  DType dt = promote_types(a.dtype(), b.dtype());
  Tensor c = cond.detach();
  Tensor out = empty_out(name, shape, dt, a.device(), {a, b, c});
  backend_for(a.device())
      .where(expand_to(c, shape), expand_to(cast_to(a.detach(), dt), shape),
             expand_to(cast_to(b.detach(), dt), shape), out);

  // Backward: each branch gets the gradient where it was chosen.
  if (autograd::needs_grad({a, b})) {
    bool need_a = autograd::needs_grad({a}), need_b = autograd::needs_grad({b});
    Shape sa = a.shape(), sb = b.shape();
    DType da = a.dtype(), db = b.dtype();
    autograd::record(name, {a, b}, {out}, [=](const Tensors& grads) -> Tensors {
      const Tensor& g = grads[0];
      Tensors r(2);
      if (need_a) {
        Tensor zero = scalar_tensor(0.0, g.dtype(), g.device());
        r[0] = grad_as(sum_to(where(c, g, zero), sa), da);
      }
      if (need_b) r[1] = grad_as(sum_to(where(c, 0.0, g), sb), db);
      return r;
    });
  }
  return out;
}

Tensor where(const Tensor& cond, double a, const Tensor& b) {
  check_defined("where", b, "b");
  return where(cond, scalar_tensor(a, scalar_operand_dtype(b.dtype(), a), b.device()), b);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  const char* name = "masked_fill";
  check_defined(name, x, "x");
  check_defined(name, mask, "mask");
  check_mask(name, mask);
  check_same_device(name, x, mask);
  bool ok = false;
  Shape shape = broadcast_shape(mask.shape(), x.shape(), &ok);
  DDP_CHECK_T(ShapeError, ok && shape == x.shape(),
              "masked_fill: mask {} does not broadcast to the shape of x {}", mask.describe(),
              x.describe());
  // The value is cast to x's dtype, like torch (the result keeps x's dtype).
  Tensor m = mask.detach();
  Tensor out = empty_out(name, shape, x.dtype(), x.device(), {x});
  backend_for(x.device())
      .where(expand_to(m, shape), expand_to(scalar_tensor(value, x.dtype(), x.device()), shape),
             x.detach(), out);

  // Backward: filled positions get no gradient.
  if (autograd::needs_grad({x})) {
    autograd::record(name, {x}, {out}, [m](const Tensors& g) -> Tensors {
      return {where(m, 0.0, g[0])};
    });
  }
  return out;
}

// ---- pow ----------------------------------------------------------------------

// Note [pow is composite]
// pow has no kernel: whole exponents use square-and-multiply (exact for
// integers, keeps the sign of negative bases), 0.5 and -0.5 use sqrt/rsqrt,
// and other real exponents use exp(e * log(x)) (NaN for negative x, like
// torch). Autograd follows the ops it is built of; only x^0 records its own
// (zero) gradient.
Tensor pow(const Tensor& x, double e) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(amp::detail::AutocastOp::pow, {x},
                                      [e](const Tensors& t) { return pow(t[0], e); });
  const char* name = "pow";
  check_defined(name, x, "x");
  DDP_CHECK_T(DTypeError, x.dtype() != DType::bool_, "pow: bool tensors are not supported, got {}",
              x.describe());
  if (e == 0.0) {
    Tensor out = ones_like(x.detach());
    if (autograd::needs_grad({x}))
      autograd::record(name, {x}, {out}, [](const Tensors& g) -> Tensors {
        return {zeros_like(g[0])};
      });
    return out;
  }
  if (e == 0.5) return sqrt(x);
  if (e == -0.5) return rsqrt(x);
  constexpr double kMaxWholeExponent = 2147483648.0;  // 2^31: at most 62 multiplies
  if (std::nearbyint(e) == e && std::fabs(e) <= kMaxWholeExponent) {
    DDP_CHECK(e > 0 || is_floating(x.dtype()),
              "pow: integer tensors cannot be raised to a negative power ({}), got {}", e,
              x.describe());
    auto n = static_cast<uint64_t>(std::fabs(e));
    Tensor result, base = x;
    while (true) {
      if (n & 1u) result = result.defined() ? mul(result, base) : base;
      n >>= 1;
      if (n == 0) break;
      base = mul(base, base);
    }
    // result may still be x itself (e = +-1): always return a new tensor.
    if (e < 0) return div(scalar_tensor(1.0, x.dtype(), x.device()), result);
    return result.is_same(x) ? mul(x, 1.0) : result;
  }
  return exp(mul(log(x), e));
}

}  // namespace ddp
