#pragma once
// Gradient clipping, as torch.nn.utils.clip_grad_norm_ and clip_grad_value_.
//
//   loss.backward();
//   double norm = optim::clip_grad_norm_(model->parameters(), /*max_norm=*/1.0);
//   opt.step();
//
// With a GradScaler, unscale the gradients first (scaler.unscale_(opt)), so
// that max_norm applies to the true gradients; see docs/grad_scaler.md.
// Under DDP, clip after backward: the gradients are then the averaged ones
// and every rank computes the same norm and scale.

#include <cmath>

#include "ddp/tensor/tensor.h"

namespace ddp::optim {

// Scales the gradients of `params` in place so that their total norm (the
// norm of all gradient elements taken together) is at most max_norm, and
// returns the total norm before clipping. Parameters whose gradient is
// undefined are skipped; with none left the norm is 0.
//
// norm_type p > 0, or INFINITY for max |g|. Every gradient is multiplied by
//   min(1, max_norm / (total + 1e-6))
// as in torch (the 1e-6 keeps a zero norm finite); a coefficient of exactly
// 1 leaves the gradients untouched. A non-finite total (an inf or NaN
// gradient) raises ddp::Error when error_if_nonfinite, and otherwise
// scales by the resulting NaN or 0 like torch.
//
// The norm is computed in one pass over all gradients (one kernel per dtype
// on a GPU) and accumulated in f64; reading it back waits for the device.
// ValueError: max_norm negative or NaN, norm_type <= 0 or NaN, or gradients
// on more than one device (DeviceError).
double clip_grad_norm_(const Tensors& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every defined gradient of `params` to [-clip_value, clip_value] in
// place. ValueError: clip_value negative or NaN.
void clip_grad_value_(const Tensors& params, double clip_value);

}  // namespace ddp::optim
