// See Note [Attention reference path] in include/ddp/nn/functional/attention.h.

#include "ddp/nn/functional/attention.h"

#include <cmath>
#include <limits>

#include "tensor/autocast_policy.h"
#include "ddp/core/error.h"
#include "ddp/tensor/ops.h"
#include "ddp/autograd/node.h"
#include "kernel_list.h"

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

// The reference path on checked inputs, with the scale resolved.
Tensor reference_path(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                      double s) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), S = k.size(2);
  Tensor q3 = q.reshape({B * H, T, D});
  Tensor k3 = k.reshape({B * H, S, D});
  Tensor v3 = v.reshape({B * H, S, D});
  Tensor scores = mul(bmm(q3, k3.transpose(1, 2)), s);  // [B·H, T, S]
  if (is_causal) {
    // Key j is hidden from query i when j > i; the [T, S] mask broadcasts
    // over B·H.
    TensorOptions idx = TensorOptions(DType::i64).device(q.device());
    Tensor rows = arange(T, idx).reshape({T, 1});
    Tensor cols = arange(S, idx).reshape({1, S});
    scores = masked_fill(scores, gt(cols, rows), -std::numeric_limits<double>::infinity());
  }
  Tensor probs = softmax(scores, -1);
  return bmm(probs, v3).reshape({B, H, T, D});
}

double resolve_scale(const Tensor& q, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(double(q.size(3)));
}

// Whether q's device has a fused attention kernel for this case, forward
// and (when autograd will record one) backward: the fused forward records a
// fused backward, so both must be there (CUDA: Note [Attention paths on
// CUDA] in attention_cuda.cpp, which may build and cache cuDNN graphs to
// find out).
bool fused_supports(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                    double scale) {
  const DeviceType d = q.device().type;
  return kernels::has_kernel<kernels::attention_supports>(d) && q.size(3) == k.size(3) &&
         q.size(2) > 0 && k.size(2) > 0 &&
         kernels::call<kernels::attention_supports>(q.device(), q, k, float(scale), is_causal,
                                                    autograd::needs_grad({q, k, v}));
}

TensorOptions on(const Tensor& like, DType dtype) {
  return TensorOptions(dtype).device(like.device());
}

// The fused kernels with their backward. The forward saves q, k, v, the
// output and the rows' log-sum-exp (f32, [B, H, T]) — O(T) extra memory
// instead of the O(T·S) probabilities. contiguous() is free for inputs that
// already are.
Tensor fused_path(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                  double scale) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2);
  // Contiguous [B, H, rows, D] detached inputs (Note [Recording backward]).
  Tensor qc = q.detach().contiguous();
  Tensor kc = k.detach().contiguous();
  Tensor vc = v.detach().contiguous();
  Tensor out = Tensor::empty(q.shape(), on(q, q.dtype()));
  Tensor lse = Tensor::empty({B, H, T}, on(q, DType::f32));
  const float s = float(scale);
  kernels::call<kernels::attention_forward>(q.device(), qc, kc, vc, out, lse, s, is_causal);
  if (autograd::needs_grad({q, k, v})) {
    // The lambda holds a detached alias of the output, never the output
    // itself (Note [Recording backward]).
    autograd::record("scaled_dot_product_attention", {q, k, v}, {out},
                     [qc, kc, vc, saved = out.detach(), lse, s, is_causal](const Tensors& g) {
                       Tensor dout = g[0].to(qc.dtype()).contiguous();
                       Tensor delta = Tensor::empty(lse.shape(), on(qc, DType::f32));
                       Tensor dq = Tensor::empty(qc.shape(), on(qc, qc.dtype()));
                       Tensor dk = Tensor::empty(kc.shape(), on(qc, qc.dtype()));
                       Tensor dv = Tensor::empty(vc.shape(), on(qc, qc.dtype()));
                       kernels::call<kernels::attention_backward>(qc.device(), qc, kc, vc, saved,
                                                                  dout, lse, delta, dq, dk, dv, s,
                                                                  is_causal);
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
  if (fused_supports(q, k, v, is_causal, s)) return fused_path(q, k, v, is_causal, s);
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

AttentionCacheStats attention_cache_stats(DeviceType device) {
  if (!kernels::has_kernel<kernels::attention_cache_stats>(device)) return {};
  const kernels::PlanCacheStats s = kernels::find_kernel<kernels::attention_cache_stats>(device)();
  return {s.entries, s.hits, s.misses};
}

}  // namespace ddp::nn::functional
