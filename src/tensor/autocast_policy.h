#pragma once
// The autocast policy table and the hook the op frontends call. Internal to
// the tensor layer: included by src/ops/*.cpp and src/nn/functional/*.cpp,
// never installed.
//
// Note [Autocast policy]
// One X-macro list says which ops consult autocast and how they cast their
// floating inputs (CastPolicy in ddp/tensor/autocast.h):
// - lower_precision: the ops whose cost is multiply-adds, which tensor cores
//   run several times faster in 16 bits, accumulating in f32 anyway.
// - f32: ops whose result loses too much in 16 bits: exp/log/pow and the
//   softmaxes (range), losses and reductions (long sums), normalisation
//   statistics (a variance is a difference of nearly equal numbers).
//   Their output is f32, so the loss is f32.
// - promote: ops that require one dtype for all inputs (cat, stack) get the
//   widest; binary arithmetic and where already promote by themselves
//   (type promotion), in or out of a scope, so they need no entry.
// Everything else (relu, gelu, pooling, dropout, embedding, views) runs in
// its input's dtype, so an activation made in bf16 stays bf16 until an f32
// op needs it. The choice follows torch.autocast's lists. batch_norm is
// keep_input: it runs in its input's dtype (a bf16 convolution's output
// stays bf16, no cast on either side) with f32 weight, bias, statistics and
// arithmetic inside its kernels, as torch with cuDNN does; see docs/amp.md.
//
// An op frontend hooks in with one statement at its top:
//
//   if (amp::detail::autocast_active())
//     return amp::detail::autocast_call(amp::detail::AutocastOp::linear, {x, weight, bias},
//                                       [](const Tensors& t) { return linear(t[0], t[1], t[2]); });
//
// autocast_call casts the inputs by the op's policy and runs the op again
// on them with autocast suspended on this thread, so the op's body, and
// every op it is built of, runs in exactly the dtypes the policy chose (a
// composite op is one unit, like a single kernel in torch's dispatcher).
// Adding an op = one line here plus that statement in its frontend; the
// test suite checks every entry's output dtype (tests/amp/autocast_test.cpp).
// Unary ops of op_list.h need no statement: unary() looks its op up here by
// name (kUnaryAutocastOp below).
//
// Layering: the state, the table and the casts live in the tensor layer
// (this header, src/tensor/autocast.cpp, ddp/tensor/autocast.h), below every
// op frontend that consults them (src/ops, src/nn/functional); they use only
// the tensor and autograd layers (Tensor::to, autograd::record). Their
// public names stay in namespace ddp::amp, where users find Autocast and
// GradScaler (ddp/amp/autocast.h re-exports them).

#include <cstdint>
#include <string_view>

#include "ddp/tensor/autocast.h"
#include "ddp/tensor/op_list.h"
#include "ddp/tensor/tensor.h"

// X(op, policy): op as named in ops.h / nn::functional, policy a CastPolicy.
#define DDP_FOR_EACH_AUTOCAST_OP(X)                \
  X(matmul, lower_precision)                       \
  X(bmm, lower_precision)                          \
  X(linear, lower_precision)                       \
  X(conv2d, lower_precision)                       \
  X(scaled_dot_product_attention, lower_precision) \
  X(softmax, f32)                                  \
  X(log_softmax, f32)                              \
  X(cross_entropy, f32)                            \
  X(mse_loss, f32)                                 \
  X(layer_norm, f32)                               \
  X(batch_norm, keep_input)                        \
  X(sum, f32)                                      \
  X(mean, f32)                                     \
  X(var, f32)                                      \
  X(exp, f32)                                      \
  X(log, f32)                                      \
  X(rsqrt, f32)                                    \
  X(pow, f32)                                      \
  X(cat, promote)                                  \
  X(stack, promote)

namespace ddp::amp::detail {

enum class AutocastOp : uint8_t {
#define DDP_AUTOCAST_ENUM(op, policy) op,
  DDP_FOR_EACH_AUTOCAST_OP(DDP_AUTOCAST_ENUM)
#undef DDP_AUTOCAST_ENUM
};

inline constexpr AutocastPolicyEntry kAutocastPolicy[] = {
#define DDP_AUTOCAST_ENTRY(op, policy) {#op, CastPolicy::policy},
    DDP_FOR_EACH_AUTOCAST_OP(DDP_AUTOCAST_ENTRY)
#undef DDP_AUTOCAST_ENTRY
};

// The AutocastOp named `name`, or -1.
constexpr int autocast_op_index(std::string_view name) {
  for (size_t i = 0; i < std::size(kAutocastPolicy); ++i)
    if (name == kAutocastPolicy[i].op) return int(i);
  return -1;
}

// For each UnaryOp (op_list.h), the index of the AutocastOp of the same
// name, or -1: so listing e.g. tanh above is all it takes to hook it.
inline constexpr int kUnaryAutocastOp[] = {
#define DDP_UNARY_AUTOCAST(name, ...) autocast_op_index(#name),
    DDP_FOR_EACH_UNARY_OP(DDP_UNARY_AUTOCAST)
#undef DDP_UNARY_AUTOCAST
};

// True when autocast is on for some device type on this thread and the
// calling op is not already running inside another op's autocast_call.
bool autocast_active();

// inputs cast by op's policy (undefined, non-floating and other devices'
// tensors pass through). Each cast is differentiable.
Tensors cast_inputs(AutocastOp op, const Tensors& inputs);

// Suspends autocast on this thread while an op's body runs.
class SuspendAutocast {
 public:
  SuspendAutocast();
  ~SuspendAutocast();
  SuspendAutocast(const SuspendAutocast&) = delete;
  SuspendAutocast& operator=(const SuspendAutocast&) = delete;
};

// See Note [Autocast policy]: fn(cast inputs) with autocast suspended.
template <class Fn>
auto autocast_call(AutocastOp op, const Tensors& inputs, Fn&& fn) {
  Tensors cast = cast_inputs(op, inputs);
  SuspendAutocast suspend;
  return fn(cast);
}

}  // namespace ddp::amp::detail
