#include "trainer.h"

#include <time.h>

#include <chrono>

#include "ddp/nn/activation.h"
#include "ddp/nn/container.h"
#include "ddp/nn/linear.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/ops.h"

namespace ddp::metrics::load {
namespace {

// CLOCK_PROCESS_CPUTIME_ID: every thread of the process; CLOCK_THREAD_CPUTIME_ID:
// the calling thread (the tensor kernels run on it: backend_cpu.cpp).
double cpu_seconds(clockid_t clock) {
  timespec t{};
  ::clock_gettime(clock, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

}  // namespace

TrainResult train(int steps, TrainingMetrics& metrics) {
  using Clock = std::chrono::steady_clock;
  constexpr double kLr = 0.01;
  manual_seed(30);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(64, 512), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(512, 512), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(512, 8)});
  const Tensor x = randn({256, 64});
  const Tensor target = randn({256, 8});
  optim::SGD opt(model->parameters(), kLr);
  metrics.learning_rate.set(kLr);
  TrainResult result;
  for (int step = 0; step < steps; ++step) {
    const auto start = Clock::now();
    const double cpu_start = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
    const double thread_cpu_start = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
    const Tensor diff = model->forward(x) - target;
    Tensor loss = mean(diff * diff);
    loss.backward();
    opt.step();
    opt.zero_grad();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    result.step_seconds.push_back(seconds);
    result.step_thread_cpu_seconds.push_back(cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - thread_cpu_start);
    result.step_cpu_seconds.push_back(cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu_start);
    result.final_loss = loss.item<float>();
    metrics.step_seconds.observe(seconds);
    metrics.steps.inc();
    metrics.loss.set(result.final_loss);
  }
  for (const Tensor& p : model->parameters()) {
    const std::vector<float> v = p.to_vector<float>();
    result.parameters.insert(result.parameters.end(), v.begin(), v.end());
  }
  return result;
}

}  // namespace ddp::metrics::load
