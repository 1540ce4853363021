#pragma once
// Layer normalisation over the trailing dims, like torch.nn.functional.layer_norm:
//
//   y = (x - mean) / sqrt(var + eps) · weight + bias
//
// with mean and (biased) var over the last normalized_shape.size() dims of x,
// which must equal normalized_shape. Forward and backward are each one fused
// kernel (kernels/cpu/layer_norm.cpp, kernels/cuda/layer_norm.cu; Note
// [LayerNorm formulas]); statistics are computed in f32 for f16/bf16/f32 and
// in f64 for f64. Backward gives dx, dweight and dbias; it is not itself
// differentiable (no double backward).

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

// weight and bias: undefined, or of shape normalized_shape, x's dtype and
// device. ShapeError when x's trailing dims differ from normalized_shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

}  // namespace ddp::nn::functional
