#pragma once
// The models bench_ddp can time, with a synthetic batch and a loss; built
// from the model zoo that bench_resnet and bench_gpt share
// (benchmarks/common/models.h).

#include <functional>
#include <memory>

#include "common/models.h"
#include "ddp/nn/module.h"
#include "options.h"

namespace bench {

struct BenchModel {
  std::shared_ptr<ddp::nn::UnaryModule> module;
  std::function<ddp::Tensor(const ddp::Tensor& out, const ddp::Tensor& target)> loss;
  int64_t num_params = 0;
  size_t grad_bytes = 0;
  ddp::DType dtype = ddp::DType::f32;
};

// Built from the same seed every time, on o.device.
BenchModel make_bench_model(const Options& o);
// Random inputs and targets of the model's shape (Batch: common/models.h),
// different on each rank.
Batch make_batch(const Options& o, int rank);

}  // namespace bench
