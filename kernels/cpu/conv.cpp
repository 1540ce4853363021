// The CPU conv2d kernels (kernels/kernel_list.h), routed by dtype as Note
// [Conv2d backends] in src/nn/functional/conv.cpp describes: oneDNN for f32,
// the plain-loop reference for f64, and f16/bf16 computed in f32 and rounded
// once; and the f32 layout copy (oneDNN's reorder).

#include "ddp/config.h"
#include "ddp/core/error.h"
#include "ddp/tensor/memory_format.h"
#include "kernel_list.h"
#include "cpu/conv.h"

namespace ddp::nn::functional::conv_detail {

namespace {

bool is_half(DType dt) { return dt == DType::f16 || dt == DType::bf16; }

// t in f32, keeping an activation's NHWC layout (a cast gives NCHW).
Tensor to_f32(const Tensor& t) {
  if (!t.defined()) return t;
  const bool nhwc = is_channels_last(t);
  Tensor c = t.to(DType::f32);
  return nhwc ? to_channels_last(c) : c.contiguous();
}

// An f32 buffer in out's layout, for a half-precision output.
Tensor f32_like(const Tensor& out) {
  if (!out.defined()) return out;
  if (out.dim() == 4) return empty_nchw(out.shape(), DType::f32, out.device(), is_channels_last(out));
  return Tensor::empty(out.shape(), TensorOptions(DType::f32));
}
void copy_back(const Tensor& buf, const Tensor& out) {
  if (out.defined()) Tensor(out).copy_(buf);
}

ConvGeometry as_f32(ConvGeometry g) {
  g.dtype = DType::f32;
  return g;
}

void require_onednn() {
  DDP_CHECK_T(NotImplementedError, DDP_HAVE_DNNL,
              "conv2d: f32 convolution on the CPU needs oneDNN, and this libddp was built "
              "without it");
}

void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
             const Tensor& y) {
  if (g.dtype == DType::f64) return reference::forward(g, x, w, b, y);
  require_onednn();
  if (!is_half(g.dtype)) return onednn::forward(g, x, w, b, y);
  Tensor y32 = f32_like(y);
  onednn::forward(as_f32(g), to_f32(x), to_f32(w), to_f32(b), y32);
  copy_back(y32, y);
}

void backward_data(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  if (g.dtype == DType::f64) return reference::backward_data(g, dy, w, dx);
  require_onednn();
  if (!is_half(g.dtype)) return onednn::backward_data(g, dy, w, dx);
  Tensor dx32 = f32_like(dx);
  onednn::backward_data(as_f32(g), to_f32(dy), to_f32(w), dx32);
  copy_back(dx32, dx);
}

void backward_weight(const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                     const Tensor& db) {
  if (g.dtype == DType::f64) return reference::backward_weights(g, x, dy, dw, db);
  require_onednn();
  if (!is_half(g.dtype)) return onednn::backward_weights(g, x, dy, dw, db);
  Tensor dw32 = f32_like(dw), db32 = f32_like(db);
  onednn::backward_weights(as_f32(g), to_f32(x), to_f32(dy), dw32, db32);
  copy_back(dw32, dw);
  copy_back(db32, db);
}

}  // namespace

DDP_REGISTER_KERNEL(conv2d_forward, CPU, forward)
DDP_REGISTER_KERNEL(conv2d_backward_data, CPU, backward_data)
DDP_REGISTER_KERNEL(conv2d_backward_weight, CPU, backward_weight)
DDP_REGISTER_KERNEL(conv2d_cache_stats, CPU, onednn::cache_stats)
DDP_REGISTER_KERNEL(conv2d_copy_layout, CPU, onednn::copy_layout)

}  // namespace ddp::nn::functional::conv_detail
