#include "train_step.h"

#include <chrono>
#include <optional>

#include "ddp/amp/autocast.h"
#include "ddp/amp/grad_scaler.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/tensor/cuda.h"

namespace bench {

namespace {

void sync_device(const ddp::Device& d) {
  if (d.is_cuda()) ddp::cuda::synchronize(d.index);
}

std::optional<ddp::DType> amp_dtype(const std::string& amp) {
  if (amp == "bf16") return ddp::DType::bf16;
  if (amp == "f16") return ddp::DType::f16;
  return std::nullopt;
}

}  // namespace

Timing time_training(TrainSetup& s, int64_t warmup, int64_t steps) {
  // bf16 keeps f32's exponent range and needs no loss scaling; a disabled
  // scaler passes everything through.
  ddp::amp::GradScaler scaler({.enabled = s.amp == "f16"});
  const std::optional<ddp::DType> low = amp_dtype(s.amp);
  ddp::Tensor loss;
  auto step = [&]() -> bool {
    if (s.eval) {
      ddp::autograd::NoGradGuard no_grad;
      std::optional<ddp::amp::Autocast> autocast;
      if (low) autocast.emplace(s.device, *low);
      loss = s.loss(s.model->forward(s.batch.x), s.batch.y);
      return true;
    }
    s.optimizer->zero_grad();
    {
      std::optional<ddp::amp::Autocast> autocast;
      if (low) autocast.emplace(s.device, *low);
      loss = s.loss(s.model->forward(s.batch.x), s.batch.y);
    }
    scaler.scale(loss).backward();
    const bool stepped = scaler.step(*s.optimizer);
    scaler.update();
    return stepped;
  };

  for (int64_t i = 0; i < warmup; ++i) step();
  Timing t;
  using Clock = std::chrono::steady_clock;
  for (int64_t i = 0; i < steps; ++i) {
    sync_device(s.device);
    const auto start = Clock::now();
    const bool stepped = step();
    sync_device(s.device);
    t.step_s.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    if (!stepped) ++t.skipped_steps;
  }
  if (loss.defined()) t.last_loss = loss.to(ddp::DType::f32).item<float>();
  return t;
}

}  // namespace bench
