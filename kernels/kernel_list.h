#pragma once
// The one list of kernel ops: every op that is not elementwise declares its
// kernel here, once, with its contract (See Note [Kernel registry]). The
// frontends call kernels::call<name>(device, ...); each backend registers its
// implementation with DDP_REGISTER_KERNEL(name, CPU|CUDA, fn) in its own file.
// Elementwise ops have their own list (ddp/tensor/op_list.h) and the Backend
// interface.
//
// Common guarantees: every tensor of one call is on the device the kernel was
// registered for (one index), outputs are allocated by the frontend, shapes
// and dtypes are already checked; numel may be 0.

#include <cstdint>
#include <vector>

#include "common/conv_geometry.h"
#include "common/foreach_math.h"
#include "ddp/core/int2.h"
#include "ddp/tensor/tensor.h"
#include "tensor/kernel_registry.h"

namespace ddp::kernels {

// ---- softmax (src/ops/softmax.cpp) ----------------------------------------------
// in, out [rows, cols] contiguous, floating, one dtype; computed in f32 (f64
// for f64). log=true gives log_softmax.
DDP_DECLARE_KERNEL(softmax_forward, void, (const Tensor& in, const Tensor& out, bool log))
// From y (the forward's output) and dy, all [rows, cols] contiguous:
// softmax dx = y·(dy − Σ dy·y); log_softmax dx = dy − exp(y)·Σ dy.
DDP_DECLARE_KERNEL(softmax_backward, void,
                   (const Tensor& y, const Tensor& dy, const Tensor& dx, bool log))

// ---- conv2d (src/nn/functional/conv.cpp) ------------------------------------------
// x, y, dy, dx in g's layout (NHWC-strided when g.channels_last, else
// contiguous NCHW); w, dw [O, C/G, KH, KW] and b, db [O] contiguous; b and db
// may be undefined. Any floating dtype (a backend converts what it cannot
// compute natively).
DDP_DECLARE_KERNEL(conv2d_forward, void,
                   (const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                    const Tensor& y))
DDP_DECLARE_KERNEL(conv2d_backward_data, void,
                   (const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx))
DDP_DECLARE_KERNEL(conv2d_backward_weight, void,
                   (const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                    const Tensor& db))
// The backend's primitive / algorithm cache.
DDP_DECLARE_KERNEL(conv2d_cache_stats, PlanCacheStats, ())

// ---- batch_norm (src/nn/functional/batch_norm.cpp) --------------------------------
// x [N, C, ...] floating, contiguous or (4-D) NHWC-strided; y like x (same
// strides). weight, bias, running_mean, running_var [C] or undefined.
// save_mean and save_invstd [C] in the statistics dtype (f64 for f64, else
// f32). Training: normalises with the batch statistics (biased variance),
// saves their mean and 1/sqrt(var + eps), and updates defined running
// statistics in place with the unbiased variance: r = (1 − m)·r + m·batch.
DDP_DECLARE_KERNEL(batch_norm_train_forward, void,
                   (const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Tensor& running_mean, const Tensor& running_var, double momentum,
                    double eps, const Tensor& y, const Tensor& save_mean,
                    const Tensor& save_invstd))
// Evaluation: normalises with the running statistics (both defined).
DDP_DECLARE_KERNEL(batch_norm_eval_forward, void,
                   (const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Tensor& running_mean, const Tensor& running_var, double eps,
                    const Tensor& y))
// Gradients from the saved statistics (for evaluation: the running mean and
// 1/sqrt(running_var + eps)); batch_stats says whether the forward used the
// batch's, eps is the forward's. dy in x's layout; dx like x; dweight,
// dbias [C] in the weight's dtype; any output undefined when not wanted.
DDP_DECLARE_KERNEL(batch_norm_backward, void,
                   (const Tensor& x, const Tensor& dy, const Tensor& weight,
                    const Tensor& save_mean, const Tensor& save_invstd, bool batch_stats,
                    double eps, const Tensor& dx, const Tensor& dweight, const Tensor& dbias))

// ---- max_pool2d (src/nn/functional/pooling.cpp) -----------------------------------
// x contiguous [P, H, W] planes (P = N·C) of f32 or f64; y and indices
// contiguous [P, OH, OW]; indices (i64) hold each maximum's position h·W + w
// in its plane, like torch's. Padding never wins; a NaN wins.
DDP_DECLARE_KERNEL(max_pool2d_forward, void,
                   (const Tensor& x, Int2 kernel, Int2 stride, Int2 padding, Int2 dilation,
                    const Tensor& y, const Tensor& indices))
// dx (contiguous [P, H, W]) = 0, then dx[p, indices[p, i]] += dy[p, i].
DDP_DECLARE_KERNEL(max_pool2d_backward, void,
                   (const Tensor& dy, const Tensor& indices, const Tensor& dx))
// The same on [N, C, H, W] NHWC-strided tensors (Note [Channels-last
// tensors]), CPU only (Note [Channels-last max_pool2d]): x, y, indices and dx
// NHWC-strided; indices hold the same h·W + w as the planar kernel's; dy
// [N, C, OH, OW] with any strides (read through them, so a broadcast or NCHW
// dy needs no copy).
DDP_DECLARE_KERNEL(max_pool2d_forward_nhwc, void,
                   (const Tensor& x, Int2 kernel, Int2 stride, Int2 padding, Int2 dilation,
                    const Tensor& y, const Tensor& indices))
DDP_DECLARE_KERNEL(max_pool2d_backward_nhwc, void,
                   (const Tensor& dy, const Tensor& indices, const Tensor& dx))

// ---- layer_norm (src/nn/functional/layer_norm.cpp) --------------------------------
// x, y [rows, cols] contiguous; weight, bias [cols] or undefined; mean, rstd
// [rows] in the statistics dtype (f64 for f64, else f32).
DDP_DECLARE_KERNEL(layer_norm_forward, void,
                   (const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                    const Tensor& y, const Tensor& mean, const Tensor& rstd))
// dx [rows, cols]; dweight, dbias [cols] in x's dtype, or undefined.
DDP_DECLARE_KERNEL(layer_norm_backward, void,
                   (const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                    const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                    const Tensor& dbias))

// ---- linear (src/nn/functional/linear.cpp) -----------------------------------------
// y [rows, out] = x [rows, in] · wᵀ (+ bias [out]) in one library call; all
// contiguous, one floating dtype. Returns false, having written nothing, when
// the library offers no algorithm for the case (the frontend then composes
// matmul and add). A device without a registration always composes.
DDP_DECLARE_KERNEL(linear_forward, bool,
                   (const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y))
// y = gelu_tanh(x·wᵀ + bias) with pre = x·wᵀ + bias (the pre-activation,
// [rows, out], saved for the backward) in one call; same contract and
// fallback as linear_forward (Note [cuBLASLt linear]).
DDP_DECLARE_KERNEL(linear_gelu_forward, bool,
                   (const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                    const Tensor& pre))
// dw [out, in] = dyᵀ [out, rows] · x [rows, in] and, when db [out] is
// defined, db = Σ_rows dy from the same GEMM; dy, x, dw, db one dtype,
// contiguous. false: nothing written, the frontend composes.
DDP_DECLARE_KERNEL(linear_backward_weight, bool,
                   (const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db))
// The backend's GEMM plan cache (Note [cuBLASLt plan cache]).
DDP_DECLARE_KERNEL(linear_cache_stats, PlanCacheStats, ())

// ---- fused attention (src/nn/functional/attention.cpp) ----------------------------
// Whether the fused kernel takes this dtype and head size; a device without
// a registration has no fused attention and uses the composite path.
DDP_DECLARE_KERNEL(attention_supports, bool, (DType dtype, int64_t head_size))
// Contiguous [B·H, rows, D] views: q, out [BH, T, D]; k, v [BH, S, D]; lse f32
// [BH, T] (the rows' log-sum-exp). out = softmax(q kᵀ · scale, causal) v.
DDP_DECLARE_KERNEL(attention_forward, void,
                   (const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& lse, float scale, bool causal))
// dq, dk, dv from dout; delta is f32 scratch [BH, T].
DDP_DECLARE_KERNEL(attention_backward, void,
                   (const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& dout, const Tensor& lse, const Tensor& delta,
                    const Tensor& dq, const Tensor& dk, const Tensor& dv, float scale,
                    bool causal))

// ---- multi-tensor steps (src/optim/foreach.cpp; Note [Foreach numerics]) ----------
// Lists as checked and staged by the frontend: contiguous, entry k of every
// list shares params[k]'s shape; one dtype per call for the steps.
// found_inf, when defined, is a 0-dim f32 on the lists' device (GradScaler's
// flag, Note [GradScaler without host syncs]): a nonzero value skips the
// whole step on the device (nothing is written), without the host reading it.
DDP_DECLARE_KERNEL(foreach_sgd_step, void,
                   (const Tensors& params, const Tensors& grads, const Tensors& bufs,
                    const std::vector<uint8_t>& fresh, const SgdScalars& s,
                    const Tensor& found_inf))
// per_tensor holds the host-computed bias corrections; or, when steps is
// non-empty, steps[k] is params[k]'s step count (0-dim f64 on the lists'
// device), which the kernel increments (unless found_inf) and computes the
// bias corrections from, so the count never travels to the host.
DDP_DECLARE_KERNEL(foreach_adamw_step, void,
                   (const Tensors& params, const Tensors& grads, const Tensors& exp_avgs,
                    const Tensors& exp_avg_sqs, const Tensors& max_exp_avg_sqs,
                    const std::vector<AdamWTensorScalars>& per_tensor, const Tensors& steps,
                    const AdamWScalars& s, const Tensor& found_inf))
// Σ |x|^p over all elements (p > 0 finite), or max |x| for p = inf; NaN when
// an element is NaN. Reading the result waits for the device.
DDP_DECLARE_KERNEL(foreach_pow_sum, double, (const Tensors& xs, double p))
// x *= factor for every tensor (GradScaler's unscale and clipping); with
// check_finite, returns whether any element was inf or NaN before.
DDP_DECLARE_KERNEL(foreach_mul, bool, (const Tensors& xs, double factor, bool check_finite))
// GradScaler's unscale without a host sync: x *= f32(1 / f64(scale)) for
// every tensor, and found_inf = 1 when any element was inf or NaN before
// (left as it is otherwise). scale and found_inf: 0-dim f32 on the lists'
// device; nothing is read back.
DDP_DECLARE_KERNEL(foreach_unscale, void,
                   (const Tensors& xs, const Tensor& scale, const Tensor& found_inf))
// GradScaler's update on tensors (update_scale in foreach_math.h): scale
// (0-dim f32) and growth_tracker (0-dim i64) in place from found_inf (0-dim
// f32, nonzero = inf/NaN seen), all on one device; nothing is read back.
DDP_DECLARE_KERNEL(amp_update_scale, void,
                   (const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                    const ScaleUpdate& u))

}  // namespace ddp::kernels
