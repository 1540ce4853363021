#pragma once
// Internal: the kernels behind nn::functional::conv2d, one namespace per
// backend with the same three entry points. The frontend (conv.cpp) checks
// arguments, allocates outputs in the input's layout and records backward;
// see Note [Conv2d backends] there.

#include <cstdint>
#include <string>

#include "ddp/nn/functional/conv.h"

namespace ddp::nn::functional::conv_detail {

// One convolution's geometry, resolved and checked by the frontend.
struct ConvGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t o = 0, kh = 0, kw = 0;       // weight [o, c / groups, kh, kw]
  int64_t oh = 0, ow = 0;              // output
  int64_t groups = 1;
  Int2 stride = 1, padding = 0, dilation = 1;
  bool channels_last = false;  // x, y, dy, dx are NHWC-strided (else contiguous NCHW)
  bool has_bias = false;
  DType dtype = DType::f32;
  // Identifies a primitive / algorithm choice in the backends' caches.
  std::string key() const;
};

// Every entry point writes its outputs (allocated by the frontend in the
// geometry's layout; w, dw, b, db contiguous). db may be undefined.
#define DDP_CONV_BACKEND_DECLS                                                                    \
  void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,          \
               const Tensor& y);                                                                  \
  void backward_data(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx); \
  void backward_weights(const ConvGeometry& g, const Tensor& x, const Tensor& dy,                 \
                        const Tensor& dw, const Tensor& db);                                      \
  ConvCacheStats cache_stats();

// CPU, f32, through oneDNN primitives (conv_onednn.cpp).
namespace onednn {
DDP_CONV_BACKEND_DECLS
// dst = src for two f32 CPU tensors of one shape and any strides, through a
// cached oneDNN reorder (far faster than a generic strided copy for the
// NCHW <-> NHWC conversions of Note [NCHW convolutions on the CPU]).
void copy_layout(const Tensor& src, const Tensor& dst);
}
// CPU, f64 only: plain loops, for gradcheck (conv_reference.cpp).
namespace reference {
DDP_CONV_BACKEND_DECLS
}
// CUDA, through cuDNN (conv_cuda.cpp; conv_nocuda.cpp raises DeviceError).
namespace cudnn {
DDP_CONV_BACKEND_DECLS
}

#undef DDP_CONV_BACKEND_DECLS

}  // namespace ddp::nn::functional::conv_detail
