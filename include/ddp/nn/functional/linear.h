#pragma once
// y = x · weightᵀ + bias, like torch.nn.functional.linear, for x of any
// leading shape [..., in], weight [out, in], bias [out] or undefined.
//
// CPU (and, until the cuBLASLt path lands, CUDA): x is viewed as a
// [rows, in] matrix, multiplied by weightᵀ with the matmul op and the bias is
// added; autograd derives the backward from those two ops (dX = dY·W,
// dW = dYᵀ·X, db = Σ_rows dY).

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

// ShapeError when x's last dim differs from weight's in-features, DTypeError
// for non-floating or mixed dtypes, DeviceError for mixed devices.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace ddp::nn::functional
