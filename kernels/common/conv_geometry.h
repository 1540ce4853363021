#pragma once
// One 2-D convolution's geometry, resolved and checked by the conv2d
// frontend (src/nn/functional/conv.cpp) and handed to the backends' kernels
// (kernels/kernel_list.h), which key their plan caches by it.

#include <cstdint>
#include <string>

#include "ddp/core/dtype.h"
#include "ddp/core/int2.h"

namespace ddp::kernels {

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

// Entries, hits and misses of a backend's plan cache.
struct PlanCacheStats {
  int64_t entries = 0, hits = 0, misses = 0;
  // conv2d on the CPU only: weight passes that reused the weight's blocked
  // copy, those that reordered it, and the bytes of the copies kept now
  // (Note [oneDNN weight cache]).
  int64_t weight_hits = 0, weight_misses = 0, weight_bytes = 0;
};

}  // namespace ddp::kernels
