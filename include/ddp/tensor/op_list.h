#pragma once
// Note [One list per op family]
// Elementwise ops are declared once here, as X-macro lists. Each entry names a
// functor in functors.h that holds the scalar forward and (for unary ops) the
// scalar derivative side by side. The CPU and CUDA backends instantiate their
// kernels from these lists, the ops frontend (ops.h) declares one function per
// entry, and the op registry (op_registry.h) that the op-consistency test
// iterates is generated from them. Adding an elementwise op = one line here
// plus its functor. Ops with their own kernel shape are Backend methods
// (bmm, gather, ...: backend.h) or kernels declared once in
// kernels/kernel_list.h (softmax, layer_norm, ...) and registered per device
// type (Note [Kernel registry]); their OpInfos are written by hand
// (op_registry_tensor_ops.cpp and the higher layers' op_infos files).

// X(name, Functor, float_only): float_only ops promote integer inputs to f32.
#define DDP_FOR_EACH_UNARY_OP(X) \
  X(relu, ReluFn, false)         \
  X(gelu, GeluTanhFn, true)      \
  X(gelu_erf, GeluErfFn, true)   \
  X(silu, SiluFn, true)          \
  X(exp, ExpFn, true)            \
  X(log, LogFn, true)            \
  X(tanh, TanhFn, true)          \
  X(sigmoid, SigmoidFn, true)    \
  X(sqrt, SqrtFn, true)          \
  X(rsqrt, RsqrtFn, true)        \
  X(neg, NegFn, false)           \
  X(abs, AbsFn, false)

// X(name, Functor)
#define DDP_FOR_EACH_BINARY_OP(X) \
  X(add, AddFn)                   \
  X(sub, SubFn)                   \
  X(mul, MulFn)                   \
  X(div, DivFn)                   \
  X(maximum, MaxFn)               \
  X(minimum, MinFn)

// X(name, Functor): the result is bool.
#define DDP_FOR_EACH_COMPARE_OP(X) \
  X(eq, EqFn)                      \
  X(ne, NeFn)                      \
  X(lt, LtFn)                      \
  X(le, LeFn)                      \
  X(gt, GtFn)                      \
  X(ge, GeFn)

// Row reductions a backend implements: input [rows, cols] contiguous, output [rows].
// Their enum is ReductionOp; ReduceOp is only the collectives' operator
// (dist::ReduceOp, torch.distributed.ReduceOp's counterpart), so that one
// name means one thing.
#define DDP_FOR_EACH_REDUCE_OP(X) \
  X(sum)                          \
  X(max)                          \
  X(min)                          \
  X(argmax)                       \
  X(argmin)

namespace ddp {

enum class UnaryOp {
#define DDP_ENUM_ENTRY(name, ...) name,
  DDP_FOR_EACH_UNARY_OP(DDP_ENUM_ENTRY)
};
enum class BinaryOp { DDP_FOR_EACH_BINARY_OP(DDP_ENUM_ENTRY) };
enum class CompareOp { DDP_FOR_EACH_COMPARE_OP(DDP_ENUM_ENTRY) };
enum class ReductionOp { DDP_FOR_EACH_REDUCE_OP(DDP_ENUM_ENTRY) };
#undef DDP_ENUM_ENTRY

const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);
const char* op_name(CompareOp op);
const char* op_name(ReductionOp op);

}  // namespace ddp
