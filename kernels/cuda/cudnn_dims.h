#pragma once
// The sizes and strides of a 4-D tensor as the ints cuDNN's legacy
// descriptors take, checked: a dim or stride beyond INT_MAX is a ShapeError
// naming the op and the tensor, never a silent wrap-around. No cuDNN types
// appear here, so the check is tested without a GPU.

#include <array>
#include <climits>

#include "ddp/core/error.h"
#include "ddp/tensor/tensor.h"

namespace ddp::nn::cudnn_util {

// {n, c, h, w, stride n, stride c, stride h, stride w} of a 4-D tensor.
inline std::array<int, 8> checked_dims(const Tensor& t, const char* op) {
  DDP_CHECK_T(ShapeError, t.dim() == 4, "{}: cuDNN tensor descriptors here are 4-D, got {}", op,
              t.describe());
  std::array<int, 8> out{};
  for (int i = 0; i < 4; ++i) {
    const int64_t size = t.size(i), stride = t.stride(i);
    DDP_CHECK_T(ShapeError, size <= INT_MAX && stride <= INT_MAX && stride >= 0,
                "{}: {} has a dim or stride beyond cuDNN's int range (dim {}: size {}, stride {})",
                op, t.describe(), i, size, stride);
    out[size_t(i)] = int(size);
    out[size_t(i) + 4] = int(stride);
  }
  return out;
}

}  // namespace ddp::nn::cudnn_util
