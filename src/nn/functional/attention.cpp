// See Note [Attention reference path] in include/ddp/nn/functional/attention.h.

#include "ddp/nn/functional/attention.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>

#include "tensor/autocast_policy.h"
#include "ddp/core/error.h"
#include "ddp/tensor/ops.h"
#include "ddp/autograd/node.h"
#include "kernel_list.h"
#include "cuda/attention_path.h"

namespace ddp::nn::functional {

namespace {

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal) {
  const char* op = "scaled_dot_product_attention";
  for (const Tensor* t : {&q, &k, &v}) {
    DDP_CHECK(t->defined(), "{}: undefined input", op);
    DDP_CHECK_T(ShapeError, t->dim() == 4, "{}: inputs must be [B, H, T, D], got {}", op,
                t->describe());
    DDP_CHECK_T(DTypeError, is_floating(t->dtype()) && t->dtype() == q.dtype(),
                "{}: inputs must share one floating dtype, got {} and {}", op, q.describe(),
                t->describe());
    DDP_CHECK_T(DeviceError, t->device() == q.device(), "{}: inputs on different devices: {} and {}",
                op, q.describe(), t->describe());
  }
  DDP_CHECK_T(ShapeError,
              k.shape() == v.shape() && q.size(0) == k.size(0) && q.size(1) == k.size(1) &&
                  q.size(3) == k.size(3),
              "{}: q {}, k {}, v {} must agree in batch, heads and head size (and k with v)", op,
              q.describe(), k.describe(), v.describe());
  DDP_CHECK_T(ShapeError, !is_causal || q.size(2) == k.size(2),
              "{}: a causal mask needs as many keys as queries: q {}, k {}", op, q.describe(),
              k.describe());
}

// Attention over N independent [rows, D] heads: q3 [N, T, D], k3 and v3
// [N, S, D], each with one batch stride (bmm reads such operands in place,
// transposed or not: Note [CPU bmm layouts]).
Tensor attend_heads(const Tensor& q3, const Tensor& k3, const Tensor& v3, bool is_causal,
                    double s) {
  const int64_t T = q3.size(1), S = k3.size(1);
  Tensor scores = mul(bmm(q3, k3.transpose(1, 2)), s);  // [N, T, S]
  if (is_causal) {
    // Key j is hidden from query i when j > i; the [T, S] mask broadcasts
    // over N.
    TensorOptions idx = TensorOptions(DType::i64).device(q3.device());
    Tensor rows = arange(T, idx).reshape({T, 1});
    Tensor cols = arange(S, idx).reshape({1, S});
    scores = masked_fill(scores, gt(cols, rows), -std::numeric_limits<double>::infinity());
  }
  return bmm(softmax(scores, -1), v3);  // [N, T, D]
}

// Whether t's batch and head dims merge into one stride, so that t viewed
// as [B·H, rows, D] is a view.
bool heads_merge(const Tensor& t) {
  return t.size(0) == 1 || t.size(1) == 1 || t.stride(0) == t.stride(1) * t.size(1);
}

// The reference path on checked inputs, with the scale resolved.
//
// Note [Strided attention on the CPU]
// GPT's q, k and v (views of the fused qkv, strides [T·3C, D, 3C, 1]) have
// batch and head strides that do not merge, so viewing them as [B·H, T, D]
// would copy each; the heads of one batch element share one stride, so such
// operands are attended one batch element at a time, read in place, and only
// the outputs are stacked.
Tensor reference_path(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                      double s) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), S = k.size(2);
  if (B > 1 && !(heads_merge(q) && heads_merge(k) && heads_merge(v))) {
    Tensors per_batch;
    for (int64_t b = 0; b < B; ++b) {
      auto heads = [&](const Tensor& t, int64_t rows) {
        return t.narrow(0, b, 1).reshape({H, rows, D});
      };
      per_batch.push_back(attend_heads(heads(q, T), heads(k, S), heads(v, S), is_causal, s));
    }
    return stack(per_batch, 0);  // [B, H, T, D]
  }
  return attend_heads(q.reshape({B * H, T, D}), k.reshape({B * H, S, D}),
                      v.reshape({B * H, S, D}), is_causal, s)
      .reshape({B, H, T, D});
}

double resolve_scale(const Tensor& q, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(double(q.size(3)));
}

// Note [Strided attention operands]
// The fused kernels (the hand kernel and cuDNN's graphs on CUDA) read every
// [B, H, rows, D] operand through its own batch, head and row strides, so
// GPT's q, k and v — views of the fused [B, T, 3C] qkv projection, strides
// [T·3C, D, 3C, 1] — reach them without a copy, as do plain contiguous
// tensors and transposed heads. What an operand needs to be read in place:
//   - a dense last dim (stride 1), and no broadcast (stride 0) dim of size
//     above 1;
//   - a 16-byte aligned data pointer and batch, head and row strides that are
//     multiples of 16 bytes (cuDNN's vector loads; GPT's views qualify when
//     C·itemsize is a multiple of 16; an aligned contiguous operand always
//     does, as a copy could not do better);
//   - for k and v, the same strides (the layout of the cuDNN graphs is
//     decided from q and k before the forward runs, Note [Attention paths on
//     CUDA], so v must have k's).
// An operand that misses one is copied once into a dense tensor (k and v
// both when only their strides differ), counted by attention_operand_copies().
// The outputs are dense in their input's dim order (attention_path::
// packed_like): out and dq follow q, dk follows k and dv v. So GPT's output
// is [B, T, H, D] in memory, one transpose from [B, T, C] (CausalSelfAttention
// reshapes it without a copy), and the gradients fold back into the qkv
// views as views. The incoming gradient dout is read in place when it has
// out's strides (GPT's has), else copied into out's layout (cuDNN's backward
// graph has dO in O's layout). dq, dk and dv are three buffers: the narrow()s'
// backward still sums them into the [B, T, 3C] gradient of qkv. The CPU has
// no fused kernel: its reference path reads such operands in place too, one
// batch element at a time (Note [Strided attention on the CPU]).

std::atomic<int64_t> g_operand_copies{0};

using attention_path::strides_of;

// Whether the fused kernels read t ([B, H, rows, D]) in place. A contiguous
// tensor at an aligned address always is: a copy would have its strides.
bool readable_in_place(const Tensor& t) {
  if (t.stride(3) != 1 || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return false;
  if (t.is_contiguous()) return true;
  const auto bytes = int64_t(element_size(t.dtype()));
  for (int64_t i = 0; i < 3; ++i)
    if (t.size(i) > 1 && (t.stride(i) == 0 || (t.stride(i) * bytes) % 16 != 0)) return false;
  return true;
}

// t as a fresh dense tensor, counted (clone: a contiguous but misaligned view
// is its own contiguous()).
Tensor dense_copy(const Tensor& t) {
  g_operand_copies.fetch_add(1, std::memory_order_relaxed);
  return t.is_contiguous() ? t.clone() : t.contiguous();
}

Tensor in_place_or_copy(const Tensor& t) { return readable_in_place(t) ? t : dense_copy(t); }

// Detached q, k, v as the fused kernels take them.
struct Operands {
  Tensor q, k, v;
};
Operands fused_operands(const Tensor& q, const Tensor& k, const Tensor& v) {
  Operands o{in_place_or_copy(q.detach()), in_place_or_copy(k.detach()),
             in_place_or_copy(v.detach())};
  if (strides_of(o.k) != strides_of(o.v)) {
    if (!o.k.is_contiguous()) o.k = dense_copy(o.k);
    if (!o.v.is_contiguous()) o.v = dense_copy(o.v);
  }
  return o;
}

TensorOptions on(const Tensor& like, DType dtype) {
  return TensorOptions(dtype).device(like.device());
}

// An uninitialised tensor of like's shape and dtype, dense in like's dim
// order (attention_path::packed_like).
Tensor empty_in_order_of(const Tensor& like) {
  const int64_t B = like.size(0), H = like.size(1), R = like.size(2), D = like.size(3);
  if (attention_path::heads_inside_rows(strides_of(like), H, R))
    return Tensor::empty({B, R, H, D}, on(like, like.dtype())).transpose(1, 2);
  return Tensor::empty({B, H, R, D}, on(like, like.dtype()));
}

// The incoming gradient in out's layout.
Tensor dout_like(const Tensor& g, const Tensor& out) {
  Tensor d = g.to(out.dtype());
  if (strides_of(d) == strides_of(out) && readable_in_place(d)) return d;
  g_operand_copies.fetch_add(1, std::memory_order_relaxed);
  Tensor staged = empty_in_order_of(out);
  staged.copy_(d);
  return staged;
}

// Whether q's device has a fused attention kernel for this case, forward
// and (when autograd will record one) backward: the fused forward records a
// fused backward, so both must be there (CUDA: Note [Attention paths on
// CUDA] in attention_cuda.cpp, which may build and cache cuDNN graphs to
// find out). `in` holds the operands as the kernels will see them (their
// strides are part of the cuDNN graphs' keys).
bool fused_supports(const Operands& in, bool is_causal, double scale, bool needs_backward) {
  return in.q.size(3) == in.k.size(3) && in.q.size(2) > 0 && in.k.size(2) > 0 &&
         kernels::call<kernels::attention_supports>(in.q.device(), in.q, in.k, float(scale),
                                                    is_causal, needs_backward);
}

// The fused kernels with their backward, recorded on the caller's q, k, v.
// The forward saves the operands, the output and the rows' log-sum-exp (f32,
// [B, H, T]) — O(T) extra memory instead of the O(T·S) probabilities.
Tensor fused_path(const Tensor& q, const Tensor& k, const Tensor& v, const Operands& in,
                  bool is_causal, double scale) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2);
  Tensor out = empty_in_order_of(in.q);
  Tensor lse = Tensor::empty({B, H, T}, on(q, DType::f32));
  const float s = float(scale);
  kernels::call<kernels::attention_forward>(q.device(), in.q, in.k, in.v, out, lse, s, is_causal);
  if (autograd::needs_grad({q, k, v})) {
    // The lambda holds a detached alias of the output, never the output
    // itself (Note [Recording backward]); the operands are detached too.
    autograd::record("scaled_dot_product_attention", {q, k, v}, {out},
                     [in, saved = out.detach(), lse, s, is_causal](const Tensors& g) {
                       Tensor dout = dout_like(g[0], saved);
                       Tensor delta = Tensor::empty(lse.shape(), on(in.q, DType::f32));
                       Tensor dq = empty_in_order_of(in.q);
                       Tensor dk = empty_in_order_of(in.k);
                       Tensor dv = empty_in_order_of(in.v);
                       kernels::call<kernels::attention_backward>(in.q.device(), in.q, in.k, in.v,
                                                                  saved, dout, lse, delta, dq, dk,
                                                                  dv, s, is_causal);
                       return Tensors{dq, dk, dv};
                     });
  }
  return out;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal, std::optional<double> scale) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(
        amp::detail::AutocastOp::scaled_dot_product_attention, {q, k, v}, [&](const Tensors& t) {
          return scaled_dot_product_attention(t[0], t[1], t[2], is_causal, scale);
        });
  check_inputs(q, k, v, is_causal);
  const double s = resolve_scale(q, scale);
  if (kernels::has_kernel<kernels::attention_supports>(q.device().type)) {
    const Operands in = fused_operands(q, k, v);
    if (fused_supports(in, is_causal, s, autograd::needs_grad({q, k, v})))
      return fused_path(q, k, v, in, is_causal, s);
  }
  return reference_path(q, k, v, is_causal, s);
}

Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                              bool is_causal, std::optional<double> scale) {
  if (amp::detail::autocast_active())  // the same policy as the op it stands in for
    return amp::detail::autocast_call(
        amp::detail::AutocastOp::scaled_dot_product_attention, {q, k, v}, [&](const Tensors& t) {
          return scaled_dot_product_attention_reference(t[0], t[1], t[2], is_causal, scale);
        });
  check_inputs(q, k, v, is_causal);
  return reference_path(q, k, v, is_causal, resolve_scale(q, scale));
}

int64_t attention_operand_copies() { return g_operand_copies.load(std::memory_order_relaxed); }

AttentionCacheStats attention_cache_stats(DeviceType device) {
  if (!kernels::has_kernel<kernels::attention_cache_stats>(device)) return {};
  const kernels::PlanCacheStats s = kernels::find_kernel<kernels::attention_cache_stats>(device)();
  return {s.entries, s.hits, s.misses};
}

}  // namespace ddp::nn::functional
