#include "ddp/nn/batch_norm.h"

#include <fmt/format.h>

#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/functional/batch_norm.h"
#include "ddp/tensor/ops.h"

namespace ddp::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, std::optional<double> momentum,
                         bool affine, bool track_running_stats)
    : UnaryModule("BatchNorm2d"),
      num_features_(num_features),
      eps_(eps),
      momentum_(momentum),
      affine_(affine),
      track_running_stats_(track_running_stats) {
  DDP_CHECK(num_features > 0, "BatchNorm2d: num_features must be positive, got {}", num_features);
  if (affine) {
    weight = register_parameter("weight", Tensor::ones({num_features}));
    bias = register_parameter("bias", Tensor::zeros({num_features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", Tensor::zeros({num_features}));
    running_var = register_buffer("running_var", Tensor::ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", Tensor::zeros({}, kInt64));
  }
}

void BatchNorm2d::check_input(const Tensor& x) const {
  DDP_CHECK_T(ShapeError, x.defined() && x.dim() == 4 && x.size(1) == num_features_,
              "{}: expected an input [N, {}, H, W], got {}", describe(), num_features_,
              x.defined() ? x.describe() : "an undefined tensor");
}

double BatchNorm2d::step_momentum_factor(const Tensor& x) {
  if (!is_training() || !track_running_stats_) return 0.0;
  {
    autograd::NoGradGuard no_grad;
    num_batches_tracked.add_(Tensor::ones({}, TensorOptions(kInt64).device(x.device())));
  }
  return momentum_ ? *momentum_ : 1.0 / double(num_batches_tracked.item<int64_t>());
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  check_input(x);
  const double factor = step_momentum_factor(x);
  if (is_training() && training_forward_) return training_forward_(x, factor);
  const bool batch_stats = is_training() || !track_running_stats_;
  return functional::batch_norm(x, running_mean, running_var, weight, bias, batch_stats, factor,
                                eps_, describe());
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const Tensor& residual) {
  // Note [Forward hooks]: a post-hook must see this layer's own output, so
  // it runs the layer apart; pre-hooks alone keep the fused op.
  if (!functional::batch_norm_fusion_enabled() || (is_training() && training_forward_) ||
      has_forward_hooks()) {
    const Tensor y = (*this)(x);
    return ::ddp::relu(residual.defined() ? add(y, residual) : y);
  }
  Tensors in{x};
  run_forward_pre_hooks(in);
  return fused_add_relu(in[0], residual);
}

Tensor BatchNorm2d::fused_add_relu(const Tensor& x, const Tensor& residual) {
  check_input(x);
  const double factor = step_momentum_factor(x);
  const bool batch_stats = is_training() || !track_running_stats_;
  return functional::batch_norm_add_relu(x, running_mean, running_var, weight, bias, residual,
                                         batch_stats, factor, eps_, describe());
}

std::string BatchNorm2d::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features_,
                     eps_, momentum_ ? fmt::format("{}", *momentum_) : "None", affine_,
                     track_running_stats_);
}

}  // namespace ddp::nn
