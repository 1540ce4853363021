// max_pool2d and adaptive_avg_pool2d: see Note [Pooling backends] in
// include/ddp/nn/functional/pooling.h.

#include "ddp/nn/functional/pooling.h"

#include <cmath>

#include "ddp/autograd/node.h"
#include "ddp/core/error.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/layout_conversions.h"
#include "ddp/tensor/ops.h"
#include "kernel_list.h"

namespace ddp::nn::functional {

namespace {

void check_input(const std::string& who, const Tensor& x) {
  DDP_CHECK(x.defined(), "{}: undefined input", who);
  DDP_CHECK_T(ShapeError, x.dim() == 4, "{}: expected a 4-D input [N, C, H, W], got {}", who,
              x.describe());
  DDP_CHECK_T(DTypeError, is_floating(x.dtype()), "{}: expected a floating input, got {}", who,
              x.describe());
}

// [out, in] rows averaging torch's adaptive windows.
Tensor averaging_matrix(int64_t out, int64_t in, DType dtype, Device device) {
  std::vector<double> a(size_t(out * in), 0.0);
  for (int64_t i = 0; i < out; ++i) {
    const int64_t lo = (i * in) / out, hi = ((i + 1) * in + out - 1) / out;
    for (int64_t j = lo; j < hi; ++j) a[size_t(i * in + j)] = 1.0 / double(hi - lo);
  }
  return Tensor::from_vector(a, {out, in}, TensorOptions(dtype).device(device));
}

// See Note [Channels-last max_pool2d] in kernels/cpu/max_pool2d.cpp: the CPU
// and CUDA kernels read and write NHWC directly, so nothing is converted.
Tensor max_pool2d_nhwc(const Tensor& x, Int2 kernel, Int2 stride, Int2 padding, Int2 dilation,
                       int64_t oh, int64_t ow) {
  const Shape ys{x.size(0), x.size(1), oh, ow};
  Tensor y = empty_nchw(ys, x.dtype(), x.device(), /*channels_last=*/true);
  Tensor indices = empty_nchw(ys, kInt64, x.device(), /*channels_last=*/true);
  kernels::call<kernels::max_pool2d_forward_nhwc>(x.device(), x.detach(), kernel, stride, padding,
                                                  dilation, y, indices);
  if (autograd::needs_grad({x})) {
    Shape xs = x.shape();
    autograd::record("max_pool2d", {x}, {y}, [indices, xs](const Tensors& g) -> Tensors {
      Tensor dy = g[0].detach();  // any strides: the kernel reads through them
      Tensor dx = empty_nchw(xs, dy.dtype(), dy.device(), /*channels_last=*/true);
      kernels::call<kernels::max_pool2d_backward_nhwc>(dy.device(), dy, indices, dx);
      return {dx};
    });
  }
  return y;
}

// The planar kernels on [N·C, H, W]: NCHW, and NHWC on a device without
// NHWC kernels, converted both ways there (counted: Note [Layout conversion
// count]).
Tensor to_planes(const Tensor& t) {
  if (!t.is_contiguous()) detail::count_layout_conversion();
  return t.detach().contiguous().view({t.size(0) * t.size(1), t.size(2), t.size(3)});
}
Tensor back_to_channels_last(const Tensor& t) {
  if (t.size(1) > 1) detail::count_layout_conversion();  // one channel: a view, no copy
  return to_channels_last(t);
}

Tensor max_pool2d_planes(const Tensor& x, Int2 kernel, Int2 stride, Int2 padding, Int2 dilation,
                         int64_t oh, int64_t ow) {
  const int64_t n = x.size(0), c = x.size(1);
  const bool cl = is_channels_last(x);
  Tensor y = Tensor::empty({n * c, oh, ow}, TensorOptions(x.dtype()).device(x.device()));
  Tensor indices = Tensor::empty({n * c, oh, ow}, TensorOptions(kInt64).device(x.device()));
  kernels::call<kernels::max_pool2d_forward>(x.device(), to_planes(x), kernel, stride, padding,
                                             dilation, y, indices);
  Tensor out = y.view({n, c, oh, ow});
  if (cl) out = back_to_channels_last(out);
  if (autograd::needs_grad({x})) {
    Shape xs = x.shape();
    autograd::record("max_pool2d", {x}, {out}, [indices, xs, cl](const Tensors& g) -> Tensors {
      Tensor dy = to_planes(g[0]);
      Tensor dx = Tensor::empty({xs[0] * xs[1], xs[2], xs[3]},
                                TensorOptions(dy.dtype()).device(dy.device()));
      kernels::call<kernels::max_pool2d_backward>(dy.device(), dy, indices, dx);
      Tensor r = dx.view(xs);
      return {cl ? back_to_channels_last(r) : r};
    });
  }
  return out;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, Int2 kernel, Int2 stride, Int2 padding, Int2 dilation,
                  const std::string& who_in) {
  const std::string who = who_in.empty() ? "max_pool2d" : who_in;
  check_input(who, x);
  DDP_CHECK(kernel.h > 0 && kernel.w > 0 && stride.h > 0 && stride.w > 0 && dilation.h > 0 &&
                dilation.w > 0 && padding.h >= 0 && padding.w >= 0 && 2 * padding.h <= kernel.h &&
                2 * padding.w <= kernel.w,
            "{}: kernel, stride and dilation must be positive and padding at most half the "
            "kernel; got kernel={}, stride={}, padding={}, dilation={}",
            who, kernel.str(), stride.str(), padding.str(), dilation.str());
  if (x.dtype() == DType::f16 || x.dtype() == DType::bf16)
    return max_pool2d(x.to(DType::f32), kernel, stride, padding, dilation, who).to(x.dtype());
  const int64_t h = x.size(2), w = x.size(3);
  const int64_t oh = conv_output_size(h, kernel.h, stride.h, padding.h, dilation.h);
  const int64_t ow = conv_output_size(w, kernel.w, stride.w, padding.w, dilation.w);
  DDP_CHECK_T(ShapeError, oh > 0 && ow > 0,
              "{}: input {} is too small for kernel {} (padding {}, dilation {})", who,
              x.describe(), kernel.str(), padding.str(), dilation.str());
  // NHWC kernels where the device has them (the CPU and CUDA), else the planar ones.
  if (is_channels_last(x) && kernels::has_kernel<kernels::max_pool2d_forward_nhwc>(x.device().type))
    return max_pool2d_nhwc(x, kernel, stride, padding, dilation, oh, ow);
  return max_pool2d_planes(x, kernel, stride, padding, dilation, oh, ow);
}

Tensor adaptive_avg_pool2d(const Tensor& x, Int2 output_size, const std::string& who_in) {
  const std::string who = who_in.empty() ? "adaptive_avg_pool2d" : who_in;
  check_input(who, x);
  DDP_CHECK(output_size.h > 0 && output_size.w > 0, "{}: output_size must be positive, got {}", who,
            output_size.str());
  DDP_CHECK_T(ShapeError, x.size(2) > 0 && x.size(3) > 0, "{}: empty spatial dims in {}", who,
              x.describe());
  if (output_size == Int2(1)) return mean(x, {2, 3}, /*keepdim=*/true);  // the ResNet head
  Tensor ah = averaging_matrix(output_size.h, x.size(2), x.dtype(), x.device());
  Tensor aw = averaging_matrix(output_size.w, x.size(3), x.dtype(), x.device());
  return matmul(matmul(ah, x), aw.t());
}

}  // namespace ddp::nn::functional
