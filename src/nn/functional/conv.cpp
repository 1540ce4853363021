// conv2d: argument checks, layout, the kernel calls and the backward, side
// by side. The kernels (kernels/kernel_list.h) are registered by
// kernels/cpu/conv.cpp (oneDNN for f32, kernels/cpu/conv_reference.cpp for
// f64) and kernels/cuda/conv_cuda.cpp (cuDNN).
//
// Note [Conv2d backends]
// - CPU f32: oneDNN convolution forward / backward-data / backward-weights
//   primitives, created once per geometry and cached.
// - CPU f64: oneDNN has no f64 convolution. A plain-loop reference
//   implementation (kernels/cpu/conv_reference.cpp) serves f64 only, so
//   that gradcheck can run on conv2d: it checks the frontend's backward wiring (which
//   gradient goes where, groups, bias, layouts) with the same three entry
//   points the oneDNN path uses, while the oneDNN kernels themselves are
//   checked against PyTorch's golden values in f32 and against this
//   reference (tests/nn/conv_test.cpp).
// - CPU f16/bf16: computed in f32 by the CPU kernels (the inputs are
//   converted, the result converted back once, in kernels/cpu/conv.cpp);
//   CPU half precision is for tests, not speed.
// - CUDA: cuDNN for every floating dtype; see Note [cuDNN convolution] in
//   kernels/cuda/conv_cuda.cpp.
// x, y, dy and dx share one layout, NCHW or NHWC (Note [Channels-last
// tensors]); weights are contiguous [O, C/G, KH, KW] on the CPU.

#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/layout_conversions.h"

#include <fmt/format.h>

#include <atomic>

#include "tensor/autocast_policy.h"
#include "ddp/autograd/node.h"
#include "ddp/core/error.h"
#include "ddp/tensor/ops.h"
#include "kernel_list.h"
#include "tensor/layout_stats.h"

namespace ddp::kernels {

std::string ConvGeometry::key() const {
  return fmt::format("{}x{}x{}x{}|{}x{}x{}|s{},{}|p{},{}|d{},{}|g{}|{}|{}|{}", n, c, h, w, o, kh,
                     kw, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, groups,
                     channels_last ? "nhwc" : "nchw", has_bias ? "b" : "nb", dtype_name(dtype));
}

}  // namespace ddp::kernels

namespace ddp::nn::functional {

using kernels::ConvGeometry;


int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding,
                         int64_t dilation) {
  const int64_t span = in + 2 * padding - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;  // C++ division truncates; torch floors
}

ConvCacheStats conv2d_cache_stats(DeviceType device) {
  if (!kernels::has_kernel<kernels::conv2d_cache_stats>(device)) return {};
  const kernels::PlanCacheStats s = kernels::find_kernel<kernels::conv2d_cache_stats>(device)();
  return {s.entries, s.hits, s.misses, s.weight_hits, s.weight_misses, s.weight_bytes};
}

int64_t layout_conversion_count() { return layout_stats::conversions(); }
void detail::count_layout_conversion() { layout_stats::count_conversion(); }

namespace {

// x's layout for the kernels: NHWC-strided or contiguous NCHW.
Tensor in_layout(const Tensor& t, bool channels_last) {
  if (channels_last ? is_channels_last(t) : t.is_contiguous()) return t;
  detail::count_layout_conversion();  // Note [Layout conversion count]
  return channels_last ? to_channels_last(t.detach()) : t.contiguous();
}

// See Note [NCHW convolutions on the CPU] (f32, CPU).
Tensor to_nhwc_cpu(const Tensor& t) {
  if (is_channels_last(t)) return t;
  if (t.size(1) == 1) return to_channels_last(t);  // a view, no copy
  detail::count_layout_conversion();
  Tensor out = empty_nchw(t.shape(), t.dtype(), t.device(), /*channels_last=*/true);
  kernels::call<kernels::conv2d_copy_layout>(t.device(), t, out);
  return out;
}
Tensor to_nchw_cpu(const Tensor& t) {
  if (t.is_contiguous()) return t;
  detail::count_layout_conversion();
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  kernels::call<kernels::conv2d_copy_layout>(t.device(), t, out);
  return out;
}

// The weight as the kernels take it (kernels/kernel_list.h): in its own
// dense layout, contiguous or NHWC-strided (oneDNN reads oihw or ohwi, Note
// [oneDNN layouts]; cuDNN either, Note [cuDNN convolution]), so a
// channels-last model's weights are never copied and its weight gradients
// come out channels-last. Any other weight is copied and counted.
Tensor kernel_weight(const Tensor& w) {
  if (w.is_contiguous() || is_channels_last(w)) return w;
  detail::count_layout_conversion();  // Note [Layout conversion count]
  return w.contiguous();
}

ConvGeometry check_args(const std::string& who, const Tensor& x, const Tensor& w, const Tensor& b,
                        const Conv2dParams& p) {
  DDP_CHECK(x.defined() && w.defined(), "{}: undefined input or weight", who);
  DDP_CHECK_T(ShapeError, x.dim() == 4, "{}: expected a 4-D input [N, C, H, W], got {}", who,
              x.describe());
  DDP_CHECK_T(ShapeError, w.dim() == 4, "{}: expected a 4-D weight [O, C/groups, KH, KW], got {}",
              who, w.describe());
  DDP_CHECK(p.groups > 0 && p.stride.h > 0 && p.stride.w > 0 && p.dilation.h > 0 &&
                p.dilation.w > 0 && p.padding.h >= 0 && p.padding.w >= 0,
            "{}: groups, stride and dilation must be positive and padding non-negative; got "
            "groups={}, stride={}, padding={}, dilation={}",
            who, p.groups, p.stride.str(), p.padding.str(), p.dilation.str());
  DDP_CHECK_T(
      DTypeError,
      is_floating(x.dtype()) && w.dtype() == x.dtype() && (!b.defined() || b.dtype() == x.dtype()),
      "{}: input, weight and bias must share one floating dtype; got {}, {}{}", who, x.describe(),
      w.describe(), b.defined() ? ", " + b.describe() : "");
  DDP_CHECK_T(DeviceError, w.device() == x.device() && (!b.defined() || b.device() == x.device()),
              "{}: input, weight and bias must be on one device; got {}, {}", who, x.describe(),
              w.describe());
  ConvGeometry g;
  g.n = x.size(0), g.c = x.size(1), g.h = x.size(2), g.w = x.size(3);
  g.o = w.size(0), g.kh = w.size(2), g.kw = w.size(3);
  g.groups = p.groups, g.stride = p.stride, g.padding = p.padding, g.dilation = p.dilation;
  DDP_CHECK_T(ShapeError, g.o % g.groups == 0 && g.c % g.groups == 0 && w.size(1) * g.groups == g.c,
              "{}: expected input[N, {}, H, W] for weight {} and groups={}, got input {}", who,
              w.size(1) * g.groups, shape_str(w.shape()), g.groups, shape_str(x.shape()));
  DDP_CHECK_T(ShapeError, !b.defined() || (b.dim() == 1 && b.size(0) == g.o),
              "{}: expected a bias [{}], got {}", who, g.o, b.describe());
  g.oh = conv_output_size(g.h, g.kh, g.stride.h, g.padding.h, g.dilation.h);
  g.ow = conv_output_size(g.w, g.kw, g.stride.w, g.padding.w, g.dilation.w);
  DDP_CHECK_T(ShapeError, g.oh > 0 && g.ow > 0 && g.n > 0 && g.kh > 0 && g.kw > 0,
              "{}: input {} (padded by {}) is too small for kernel {} with dilation {}: the "
              "output would be [{}, {}, {}, {}]",
              who, shape_str(x.shape()), p.padding.str(), Int2(g.kh, g.kw).str(), p.dilation.str(),
              g.n, g.o, g.oh, g.ow);
  g.channels_last = is_channels_last(x);
  g.has_bias = b.defined();
  g.dtype = x.dtype();
  return g;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& params,
              const std::string& who_in) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(
        amp::detail::AutocastOp::conv2d, {x, weight, bias},
        [&](const Tensors& t) { return conv2d(t[0], t[1], t[2], params, who_in); });
  const std::string who = who_in.empty() ? "conv2d" : who_in;
  ConvGeometry g = check_args(who, x, weight, bias, params);

  // Note [NCHW convolutions on the CPU]
  // oneDNN's kernels run NHWC (Note [oneDNN layouts]). An NCHW f32 convolution
  // converts x and dy once here, and keeps x's NHWC copy for backward-weights,
  // instead of each pass converting its own inputs: four layout passes per
  // convolution instead of six. y and dx are handed back NCHW, so callers see
  // no difference.
  const bool nchw_out = !x.is_cuda() && g.dtype == DType::f32 && !g.channels_last;
  if (nchw_out) g.channels_last = true;
  Tensor xin = nchw_out ? to_nhwc_cpu(x.detach()) : in_layout(x.detach(), g.channels_last);
  Tensor w = kernel_weight(weight.detach());
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor y = empty_nchw({g.n, g.o, g.oh, g.ow}, g.dtype, x.device(), g.channels_last);
  kernels::call<kernels::conv2d_forward>(x.device(), g, xin, w, b, y);
  if (nchw_out) y = to_nchw_cpu(y);

  if (autograd::needs_grad({x, weight, bias})) {
    const bool need_dx = autograd::needs_grad({x});
    const bool need_dw = autograd::needs_grad({weight});
    const bool need_db = autograd::needs_grad({bias});
    autograd::record(
        "conv2d", {x, weight, bias}, {y},
        [g, xin, w, need_dx, need_dw, need_db, nchw_out](const Tensors& grads) -> Tensors {
          Tensor dy = nchw_out ? to_nhwc_cpu(grads[0].detach())
                               : in_layout(grads[0].detach(), g.channels_last);
          Tensor dx, dw, db;
          if (need_dx) {
            dx = empty_nchw({g.n, g.c, g.h, g.w}, g.dtype, dy.device(), g.channels_last);
            kernels::call<kernels::conv2d_backward_data>(dy.device(), g, dy, w, dx);
            if (nchw_out) dx = to_nchw_cpu(dx);
          }
          if (need_dw || need_db) {
            TensorOptions opts = TensorOptions(g.dtype).device(dy.device());
            dw = empty_nchw(w.shape(), g.dtype, dy.device(), is_channels_last(w));  // w's layout
            if (g.has_bias) db = Tensor::empty({g.o}, opts);
            kernels::call<kernels::conv2d_backward_weight>(dy.device(), g, xin, dy, dw, db);
          }
          return {dx, need_dw ? dw : Tensor(), need_db ? db : Tensor()};
        });
  }
  return y;
}

}  // namespace ddp::nn::functional

namespace ddp::nn::functional {

namespace {
std::atomic<int64_t> g_unfused{0};
}
int64_t conv2d_bias_relu_unfused_count() { return g_unfused.load(std::memory_order_relaxed); }

// Note [Fused conv + bias + ReLU]
// An inference fusion: cuDNN runs the convolution, the bias add and the
// ReLU in one kernel (conv2d_bias_relu_forward), so y is written once
// instead of three times. It has no backward: when a gradient is needed
// (grad mode on and an input that requires grad), the call composes
// conv2d and relu, which autograd differentiates as usual, so the op is
// safe in training code and only faster in inference. The CPU has no fused
// kernel and composes too; so does CUDA when no cuDNN engine takes the
// fused graph (f64, some layouts). conv2d_bias_relu_unfused_count() counts
// the composed calls.
Tensor conv2d_bias_relu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Conv2dParams& params, const std::string& who_in) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]: conv2d's policy
    return amp::detail::autocast_call(
        amp::detail::AutocastOp::conv2d, {x, weight, bias},
        [&](const Tensors& t) { return conv2d_bias_relu(t[0], t[1], t[2], params, who_in); });
  const std::string who = who_in.empty() ? "conv2d_bias_relu" : who_in;
  ConvGeometry g = check_args(who, x, weight, bias, params);
  if (!autograd::needs_grad({x, weight, bias}) && x.is_cuda() &&
      kernels::has_kernel<kernels::conv2d_bias_relu_forward>(DeviceType::CUDA)) {
    Tensor xin = in_layout(x.detach(), g.channels_last);
    Tensor w = kernel_weight(weight.detach());
    Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
    Tensor y = empty_nchw({g.n, g.o, g.oh, g.ow}, g.dtype, x.device(), g.channels_last);
    if (kernels::call<kernels::conv2d_bias_relu_forward>(x.device(), g, xin, w, b, y)) return y;
  }
  g_unfused.fetch_add(1, std::memory_order_relaxed);
  return relu(conv2d(x, weight, bias, params, who));
}

}  // namespace ddp::nn::functional
