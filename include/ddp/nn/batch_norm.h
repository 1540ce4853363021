#pragma once
// BatchNorm2d, like torch.nn.BatchNorm2d: parameters "weight" (ones) and
// "bias" (zeros) when affine; buffers "running_mean" (zeros), "running_var"
// (ones) and "num_batches_tracked" (i64 0) when track_running_stats. In
// training (or without running statistics) it normalises with the batch's
// statistics and updates the running ones (the unbiased variance, as torch);
// in eval it uses the running statistics. momentum = nullopt uses the
// cumulative average 1 / num_batches_tracked, as torch's momentum=None.
// The computation is nn::functional::batch_norm.

#include <cstdint>
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
  std::string extra_repr() const override;

  int64_t num_features() const { return num_features_; }

  Tensor weight, bias;                                    // undefined unless affine
  Tensor running_mean, running_var, num_batches_tracked;  // undefined unless tracking

 private:
  int64_t num_features_;
  double eps_;
  std::optional<double> momentum_;
  bool affine_, track_running_stats_;
};

}  // namespace ddp::nn
