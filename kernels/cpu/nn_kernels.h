#pragma once
// CPU kernels of the nn layers that are not composed from tensor ops (the
// tensor ops' kernels are in kernels.h). The frontends in src/nn/functional/
// check arguments and pass contiguous tensors of one floating dtype.

#include <cstdint>

#include "ddp/tensor/tensor.h"

namespace ddp::cpu {

// layer_norm.cpp. x, y [rows, cols]; weight, bias [cols] or undefined;
// mean, rstd [rows] in the compute dtype (f64 for f64, f32 otherwise).
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd);
// dx [rows, cols]; dweight, dbias [cols] (or undefined: not wanted), written
// in x's dtype.
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                         const Tensor& dweight, const Tensor& dbias);

// gelu.cpp: the exact (erf) GELU and its derivative, elementwise over
// contiguous tensors of one shape.
void gelu_erf(const Tensor& x, const Tensor& y);
void gelu_erf_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);

}  // namespace ddp::cpu
