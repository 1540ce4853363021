#pragma once
// Internal: the CPU convolution backend's two implementations, which
// kernels/cpu/conv.cpp registers as the CPU conv2d kernels (routing by
// dtype; see Note [Conv2d backends] in src/nn/functional/conv.cpp): oneDNN
// primitives for f32 (kernels/cpu/conv_onednn.cpp) and plain loops for f64
// (kernels/cpu/conv_reference.cpp). Contracts as in kernels/kernel_list.h.

#include "common/conv_geometry.h"
#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional::conv_detail {

using kernels::ConvGeometry;
using kernels::PlanCacheStats;

#define DDP_CONV_CPU_DECLS                                                                        \
  void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,          \
               const Tensor& y);                                                                  \
  void backward_data(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx); \
  void backward_weights(const ConvGeometry& g, const Tensor& x, const Tensor& dy,                 \
                        const Tensor& dw, const Tensor& db);

// CPU, f32, through oneDNN primitives (conv_onednn.cpp).
namespace onednn {
DDP_CONV_CPU_DECLS
PlanCacheStats cache_stats();
// dst = src for two f32 CPU tensors of one shape and any strides, through a
// cached oneDNN reorder (far faster than a generic strided copy for the
// NCHW <-> NHWC conversions of Note [NCHW convolutions on the CPU]).
void copy_layout(const Tensor& src, const Tensor& dst);
}  // namespace onednn
// CPU, f64 only: plain loops, for gradcheck (conv_reference.cpp).
namespace reference {
DDP_CONV_CPU_DECLS
}

#undef DDP_CONV_CPU_DECLS

}  // namespace ddp::nn::functional::conv_detail
