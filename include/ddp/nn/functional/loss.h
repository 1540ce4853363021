#pragma once
// Losses, like torch.nn.functional's cross_entropy and mse_loss.

#include <cstdint>

#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional {

// How per-element losses are combined: as torch's reduction= strings.
enum class Reduction { none, mean, sum };

// Cross entropy of class logits against class indices: softmax and negative
// log-likelihood fused (Note [Fused cross entropy]).
//
//   logits [N, C] with target [N], or [N, C, d1, ...] with target [N, d1, ...],
//   or [C] with a 0-dim target; target i64 with values in [0, C) or
//   ignore_index.
//
// With label smoothing ε the target distribution is (1-ε)·one_hot + ε/C.
// Rows whose target is ignore_index contribute 0 and are not counted:
// "mean" divides by the number of other rows (NaN when there are none, as in
// torch), "sum" adds, "none" returns the per-row losses in target's shape.
// f16/bf16 logits are computed in f32 and the loss returned in their dtype.
// Errors: ShapeError for mismatched shapes, DTypeError for a non-i64 target
// or non-floating logits, IndexError for a target outside [0, C) (on CUDA
// raised at the next synchronisation point: Deferred device errors in
// docs/nn.md), ValueError for ε outside [0, 1].
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::mean, double label_smoothing = 0.0,
                     int64_t ignore_index = -100);

// (input - target)² combined by `reduction`; input and target have one
// shape and one floating dtype. Composed from tensor ops, so both get
// gradients.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

}  // namespace ddp::nn::functional
