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
//
// Every registration lives under kernels/: kernels/cpu/ (loops, and the
// oneDNN and f64 reference convolutions) and kernels/cuda/ (*.cu, and the
// cuDNN and cuBLASLt wrappers, *_cuda.cpp; Note [Source file names] in
// src/CMakeLists.txt). A kernel stands below the op frontends: no kernel
// includes ddp/tensor/ops.h, an autograd header or a layer above the tensor
// layer (the check: tests/docs/check_kernel_includes.py); a wrapper's
// fallback uses the Tensor's own methods and the Backend.

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
// contiguous NCHW); b, db [O] contiguous and may be undefined. w, dw
// [O, C/G, KH, KW]: contiguous on the CPU; on CUDA contiguous or
// NHWC-strided, independently of x (the parameter's own layout, Note [cuDNN
// convolution]), with dw allocated in w's layout. Any floating dtype (a
// backend converts what it cannot compute natively).
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
// y = relu(conv(x, w) + b) in one fused pass, for inference (no backward).
// Tensors as for conv2d_forward; b may be undefined (conv + ReLU). Returns
// false, writing nothing, when the backend has no fused engine for this
// case (the frontend then composes). Registered on CUDA only.
DDP_DECLARE_KERNEL(conv2d_bias_relu_forward, bool,
                   (const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                    const Tensor& y))
// dst = src for two f32 tensors of one shape and any strides: the layout
// conversions (NCHW <-> NHWC) of Note [NCHW convolutions on the CPU], which
// the CPU registration makes with a cached oneDNN reorder, far faster than a
// generic strided copy. Registered on the CPU only (without oneDNN it raises
// NotImplementedError, as the f32 convolution kernels do).
DDP_DECLARE_KERNEL(conv2d_copy_layout, void, (const Tensor& src, const Tensor& dst))

// ---- batch_norm (src/nn/functional/batch_norm.cpp) --------------------------------
// x [N, C, ...] floating, contiguous or (4-D) NHWC-strided; y like x (same
// strides). weight, bias, running_mean, running_var [C] or undefined.
// save_mean and save_invstd [C] in the statistics dtype (f64 for f64, else
// f32). Training: normalises with the batch statistics (biased variance),
// saves their mean and 1/sqrt(var + eps), and updates defined running
// statistics in place with the unbiased variance: r = (1 − m)·r + m·batch,
// rounded as ddp::update_running_stat rounds (the frontend's composite path
// and SyncBatchNorm use it; a library kernel makes the update in its own
// pass, cuDNN's batchnorm node; the CPU loops as Note [Running statistics
// on the CPU] in kernels/cpu/batch_norm.cpp).
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

// Fused batch_norm_add_relu (Note [BatchNorm + add + ReLU fusion] in
// include/ddp/nn/functional/batch_norm.h): y = relu(bn(x) + residual), the
// bn result rounded to x's dtype before the add, as the composed ops do.
// residual like x (shape, dtype, layout) or undefined (y = relu(bn(x))).
// The other arguments as batch_norm_train_forward / _eval_forward.
DDP_DECLARE_KERNEL(batch_norm_add_relu_train_forward, void,
                   (const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Tensor& running_mean, const Tensor& running_var, const Tensor& residual,
                    double momentum, double eps, const Tensor& y, const Tensor& save_mean,
                    const Tensor& save_invstd))
DDP_DECLARE_KERNEL(batch_norm_add_relu_eval_forward, void,
                   (const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Tensor& running_mean, const Tensor& running_var, const Tensor& residual,
                    double eps, const Tensor& y))
// The backward from y (the forward's output, in x's layout): dz = dy where
// y > 0, else 0; dresidual = dz (undefined when not wanted); dx, dweight,
// dbias as batch_norm_backward given dz.
DDP_DECLARE_KERNEL(batch_norm_add_relu_backward, void,
                   (const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& weight,
                    const Tensor& save_mean, const Tensor& save_invstd, bool batch_stats,
                    double eps, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                    const Tensor& dresidual))

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
// tensors]), on the CPU and CUDA (Note [Channels-last max_pool2d]): x, y, indices and dx
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

// ---- embedding (src/nn/functional/embedding.cpp) -----------------------------------
// weight [num, dim] contiguous floating; index [n] contiguous i64 or i32;
// out [n, dim] contiguous in weight's dtype: out[i] = weight[index[i]]. An
// index outside [0, num): the CPU raises IndexError naming "embedding", the
// value and its position; CUDA records it in the device error record and
// writes a zero row (Note [Deferred device errors]).
DDP_DECLARE_KERNEL(embedding_forward, void,
                   (const Tensor& weight, const Tensor& index, const Tensor& out))
// dweight [num, dim] contiguous (weight's dtype) = Σ over i with index[i] = r
// of dy[i] (dy [n, dim] contiguous), summed in the compute type in the order
// of i, so the result is deterministic and equal on every backend. Bad
// indices: as in forward (their rows are skipped).
DDP_DECLARE_KERNEL(embedding_backward, void,
                   (const Tensor& dy, const Tensor& index, const Tensor& dweight))

// ---- cross_entropy (src/nn/functional/loss.cpp; Note [Fused cross entropy]) ------
// logits [n, C] contiguous floating; target [n] contiguous i64; loss and lse
// [n] contiguous in the compute dtype (f64 for f64, else f32). Per row i:
//   lse_i  = log Σ_c exp(x_ic)
//   loss_i = valid_i · ((1−ε)·(lse_i − x_{i,t_i}) + ε·(lse_i − Σ_c x_ic / C))
// with valid_i = (t_i != ignore_index), ε = label_smoothing. A target outside
// [0, C) other than ignore_index: the CPU raises IndexError naming
// "cross_entropy"; CUDA records it (Note [Deferred device errors]) and writes
// NaN as that row's loss.
DDP_DECLARE_KERNEL(cross_entropy_forward, void,
                   (const Tensor& logits, const Tensor& target, int64_t ignore_index,
                    double label_smoothing, const Tensor& loss, const Tensor& lse))
// dx [n, C] contiguous in logits' dtype:
//   dx_ic = valid_i · scale_i · (exp(x_ic − lse_i) − (1−ε)·[c = t_i] − ε/C)
// with lse from forward and scale [n] contiguous in the compute dtype. A
// target out of range matches no class (forward has reported it).
DDP_DECLARE_KERNEL(cross_entropy_backward, void,
                   (const Tensor& logits, const Tensor& target, const Tensor& lse,
                    const Tensor& scale, int64_t ignore_index, double label_smoothing,
                    const Tensor& dx))

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
// The backward-data GEMM of a linear that consumes a tanh GELU, with the
// GELU's derivative and bias gradient fused (Note [linear_gelu_linear]):
// dh [rows, hid] = (dz [rows, out] · w [out, hid]) ∘ gelu_tanh'(h [rows, hid])
// and, when db [hid] is defined, db = Σ_rows dh from the same GEMM; one
// dtype, contiguous. false: nothing written, the frontend composes.
DDP_DECLARE_KERNEL(linear_dgelu_bgrad, bool,
                   (const Tensor& dz, const Tensor& w, const Tensor& h, const Tensor& dh,
                    const Tensor& db))
// The backend's GEMM plan cache (Note [cuBLASLt plan cache]).
DDP_DECLARE_KERNEL(linear_cache_stats, PlanCacheStats, ())

// ---- fused attention (src/nn/functional/attention.cpp) ----------------------------
// Whether the fused kernels take this call, q [B, H, T, D] and k [B, H, S, D]
// as the kernels will get them (shapes, strides, dtype and device are read,
// never the data: strides are part of cuDNN's graph keys; T, S > 0), for the forward
// and, when needs_backward, for the backward that will follow: a fused
// forward must pair with a fused backward. false: the frontend takes the
// composite (reference) path for both passes. It may build and cache
// library plans to find out (cuDNN's engines depend on the GPU, the version
// and the shape). A device without a registration has no fused attention.
// CUDA: Note [Attention paths on CUDA] in kernels/cuda/attention_cuda.cpp.
DDP_DECLARE_KERNEL(attention_supports, bool,
                   (const Tensor& q, const Tensor& k, float scale, bool causal,
                    bool needs_backward))
// Operands [B, H, rows, D] read through their own strides (dense last dim,
// 16-byte aligned; Note [Strided attention operands] in
// src/nn/functional/attention.cpp): q, out [B, H, T, D]; k, v [B, H, S, D];
// outputs dense in their input's dim order. lse f32 [B, H, T] (the rows'
// natural-log log-sum-exp of the scaled, masked scores: every fused path
// writes and reads the same quantity, so a forward of one path pairs with a
// backward of another). out = softmax(q kᵀ · scale, causal) v.
DDP_DECLARE_KERNEL(attention_forward, void,
                   (const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& lse, float scale, bool causal))
// dq, dk, dv (laid out like q, k, v) from dout (out's strides); delta is f32
// scratch [B, H, T].
DDP_DECLARE_KERNEL(attention_backward, void,
                   (const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& dout, const Tensor& lse, const Tensor& delta,
                    const Tensor& dq, const Tensor& dk, const Tensor& dv, float scale,
                    bool causal))
// The cuDNN attention graphs built and reused (forward and backward; all
// zero where the fused kernels do not use cuDNN).
DDP_DECLARE_KERNEL(attention_cache_stats, PlanCacheStats, ())

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
