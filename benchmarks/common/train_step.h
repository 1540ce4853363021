#pragma once
// The step that bench_resnet and bench_gpt time, and the loop that times it.
//
// Note [What a benchmark step is]
// One step = zero_grad, forward and loss under autocast (when --amp is bf16
// or f16), backward (of the loss times the GradScaler's scale for f16), and
// the optimizer's step (through the scaler for f16, which skips it on an inf
// or NaN gradient), as in a training loop. The clock starts after the
// device has finished everything before it and stops after it has finished
// the step (cuda::synchronize for a GPU), so each step's time is the
// device's, not how long the host took to queue kernels. The batch is made
// once before any step (models.h), so no data loading is timed. Warm-up
// steps run the same code untimed: they build cuDNN/oneDNN plans, fill the
// caching allocator and create the optimizer state.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/nn/module.h"
#include "ddp/optim/optimizer.h"
#include "models.h"

namespace bench {

struct TrainSetup {
  std::shared_ptr<ddp::nn::UnaryModule> model;
  std::function<ddp::Tensor(const ddp::Tensor& out, const ddp::Tensor& target)> loss;
  std::shared_ptr<ddp::optim::Optimizer> optimizer;
  Batch batch;
  ddp::Device device;
  std::string amp = "off";  // off | bf16 | f16
  // Inference instead of training: forward and loss under NoGradGuard, no
  // backward and no optimizer (which may then be null). The caller puts
  // the model in eval mode.
  bool eval = false;
};

struct Timing {
  std::vector<double> step_s;  // one per timed step
  int skipped_steps = 0;       // timed steps whose update GradScaler skipped (f16)
  double last_loss = 0;        // the loss of the last step (read after timing)
};

// Runs `warmup` untimed and `steps` timed steps (Note [What a benchmark
// step is]).
Timing time_training(TrainSetup& setup, int64_t warmup, int64_t steps);

}  // namespace bench
