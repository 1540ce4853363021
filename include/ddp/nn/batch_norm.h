#pragma once
// BatchNorm2d, like torch.nn.BatchNorm2d: parameters "weight" (ones) and
// "bias" (zeros) when affine; buffers "running_mean" (zeros), "running_var"
// (ones) and "num_batches_tracked" (i64 0) when track_running_stats. In
// training (or without running statistics) it normalises with the batch's
// statistics and updates the running ones (the unbiased variance, as torch);
// in eval it uses the running statistics. momentum = nullopt uses the
// cumulative average 1 / num_batches_tracked, as torch's momentum=None.
// The computation is nn::functional::batch_norm; forward_add_relu is the
// fused relu(bn(x) + residual) of a ResNet block's end
// (nn::functional::batch_norm_add_relu).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "ddp/nn/module.h"

namespace ddp::nn {

class BatchNorm2d : public UnaryModule {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true);

  // x: [N, num_features, H, W]; ShapeError naming this module otherwise.
  Tensor forward(const Tensor& x) override;
  // relu(forward(x) + residual), residual undefined: relu(forward(x)); one
  // fused op (Note [BatchNorm + add + ReLU fusion] in
  // ddp/nn/functional/batch_norm.h). With a training-forward hook installed
  // (SyncBatchNorm) or the fusion switched off, the ops are composed, with
  // the same result. This layer's forward hooks run (Note [Forward hooks]).
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual = Tensor());
  std::string extra_repr() const override;

  int64_t num_features() const { return num_features_; }
  double eps() const { return eps_; }
  std::optional<double> momentum() const { return momentum_; }
  bool affine() const { return affine_; }
  bool track_running_stats() const { return track_running_stats_; }

  // Note [Training forward hook]
  // Computes a training-mode forward in place of functional::batch_norm,
  // given the input (already checked) and this step's momentum factor
  // (num_batches_tracked already counted). parallel::convert_sync_batchnorm
  // installs one that reduces the statistics across ranks, which changes the
  // layer in place: models call their BatchNorm2d members directly, so
  // swapping the object would not reach their forward. Empty: the default.
  using TrainingForward = std::function<Tensor(const Tensor& x, double momentum_factor)>;
  void set_training_forward(TrainingForward fn) { training_forward_ = std::move(fn); }

  Tensor weight, bias;                                    // undefined unless affine
  Tensor running_mean, running_var, num_batches_tracked;  // undefined unless tracking

 private:
  Tensor fused_add_relu(const Tensor& x, const Tensor& residual);
  void check_input(const Tensor& x) const;
  // Counts the batch when training with running statistics and returns this
  // step's momentum factor (torch's exponential_average_factor).
  double step_momentum_factor(const Tensor& x);

  int64_t num_features_;
  double eps_;
  std::optional<double> momentum_;
  bool affine_, track_running_stats_;
  TrainingForward training_forward_;
};

}  // namespace ddp::nn
