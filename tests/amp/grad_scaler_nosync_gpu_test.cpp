// GradScaler's device path (Note [GradScaler without host syncs] in
// src/amp/grad_scaler.cpp): scale, unscale_, step and update on CUDA
// gradients must only queue work, never wait for the GPU. The test holds
// the stream back with a host function that waits for a flag, runs several
// scaler steps (some with inf/NaN) on another thread and requires them to
// return while the stream is still held: any host sync (an item(), a
// stream or device synchronize, a blocking copy) would wait for the held
// stream and time out. Then it releases the stream and checks the results
// against the same run on the CPU (the host path). Skipped without a GPU.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

#include "ddp/amp/grad_scaler.h"
#include "ddp/optim/adamw.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"

namespace ddp::test {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

// Holds stream s back until open(): a host function queued on s spins on a
// shared flag (for at most 60 s). cudaLaunchHostFunc comes from the
// libcudart libddp loaded (the tests do not link CUDA).
class Hold {
 public:
  explicit Hold(const cuda::Stream& s) : open_(std::make_shared<std::atomic<bool>>(false)) {
    using Launch = int (*)(void* stream, void (*fn)(void*), void* data);
    auto launch = reinterpret_cast<Launch>(dlsym(RTLD_DEFAULT, "cudaLaunchHostFunc"));
    if (!launch) throw std::runtime_error("cudaLaunchHostFunc not found in the process");
    auto* arg = new std::shared_ptr<std::atomic<bool>>(open_);
    if (launch(s.handle(), &Hold::wait, arg) != 0) {
      delete arg;
      throw std::runtime_error("cudaLaunchHostFunc failed");
    }
  }
  ~Hold() { open(); }
  void open() { open_->store(true); }

 private:
  static void wait(void* arg) {
    std::unique_ptr<std::shared_ptr<std::atomic<bool>>> flag(
        static_cast<std::shared_ptr<std::atomic<bool>>*>(arg));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!(*flag)->load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::shared_ptr<std::atomic<bool>> open_;
};

struct ScalerRun {
  Tensors params;
  std::unique_ptr<optim::SGD> sgd;     // params[0..1], with momentum
  std::unique_ptr<optim::AdamW> adamw;  // params[2..3]
  amp::GradScaler scaler{{.init_scale = 1024, .growth_interval = 2}};
};

ScalerRun make_run(Device d) {
  Generator gen(5);
  ScalerRun r;
  const Shape shapes[] = {{300, 7}, {40000}, {129}, {64, 65}};
  for (const Shape& s : shapes)
    r.params.push_back(randn(s, DType::f32, &gen).to(d).detach().set_requires_grad());
  r.sgd = std::make_unique<optim::SGD>(Tensors{r.params[0], r.params[1]}, 1e-2,
                                       optim::SGDOptions{.momentum = 0.9});
  r.adamw = std::make_unique<optim::AdamW>(Tensors{r.params[2], r.params[3]}, 1e-3);
  return r;
}

// Step s's gradients (scaled by 1024): an inf in SGD's gradients in step 2,
// a NaN in AdamW's in step 5.
Tensors grads_for(const ScalerRun& r, int s, Device d) {
  Generator gen(100 + uint64_t(s));
  Tensors out;
  for (size_t k = 0; k < r.params.size(); ++k) {
    Tensor g = mul(randn(r.params[k].shape(), DType::f32, &gen), 1024.0);
    if ((s == 2 && k == 1) || (s == 5 && k == 3))
      g.reshape({-1}).narrow(0, 3, 1).fill_(s == 2 ? INFINITY : NAN);
    out.push_back(g.to(d));
  }
  return out;
}

// One scaler step of both optimizers; returns the two results, unread.
std::pair<amp::StepResult, amp::StepResult> scaler_step(ScalerRun& r, const Tensors& grads) {
  for (size_t k = 0; k < r.params.size(); ++k) r.params[k].set_grad(grads[k]);
  amp::StepResult a = r.scaler.step(*r.sgd);
  amp::StepResult b = r.scaler.step(*r.adamw);
  r.scaler.update();
  return {a, b};
}

TEST(GradScalerNoSync, StepsOnlyQueueWorkAndMatchTheHostPath) {
  SKIP_WITHOUT_GPU();
  const Device gpu{DeviceType::CUDA, 0};
  const int kSteps = 7;
  ScalerRun dev = make_run(gpu), host = make_run(Device::cpu());
  std::vector<Tensors> dev_grads;
  for (int s = 0; s < kSteps; ++s) dev_grads.push_back(grads_for(dev, s, gpu));

  // Step 0 makes the device scale, the momentum buffers (whose creation
  // reads the flag once) and AdamW's device step counts.
  scaler_step(dev, dev_grads[0]);
  scaler_step(host, grads_for(host, 0, Device::cpu()));
  cuda::synchronize(0);

  std::vector<std::pair<amp::StepResult, amp::StepResult>> results;
  Tensor loss = Tensor::scalar(0.375, TensorOptions(DType::f32).device(gpu));
  Tensors scaled_losses;  // scale(loss) before each step
  {
    const cuda::Stream stream = cuda::current_stream(0);
    Hold hold(stream);
    auto queued = std::async(std::launch::async, [&] {
      cuda::StreamGuard on(stream);  // the worker queues on the held stream too
      for (int s = 1; s < kSteps; ++s) {
        scaled_losses.push_back(dev.scaler.scale(loss));
        results.push_back(scaler_step(dev, dev_grads[s]));
      }
    });
    const bool returned = queued.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    EXPECT_TRUE(returned) << "the scaler steps waited for the held stream: a host sync";
    cuda::Event pending;
    pending.record(stream);
    EXPECT_FALSE(pending.query()) << "the stream ran while held: the test proves nothing";
    hold.open();
    queued.get();
  }
  for (int s = 1; s < kSteps; ++s) {
    EXPECT_EQ(scaled_losses[size_t(s - 1)].item<float>(), float(0.375 * host.scaler.get_scale()))
        << "step " << s;
    auto [a, b] = scaler_step(host, grads_for(host, s, Device::cpu()));
    const auto& [da, db] = results[size_t(s - 1)];
    EXPECT_FALSE(da.known()) << "step " << s << ": the result was read on the host";
    EXPECT_EQ(bool(da), bool(a)) << "step " << s;
    EXPECT_EQ(bool(db), bool(b)) << "step " << s;
    EXPECT_EQ(bool(a), s != 2) << "step " << s;  // SGD's gradients hold the inf of step 2
    EXPECT_EQ(bool(b), s != 5) << "step " << s;  // AdamW's the NaN of step 5
  }
  EXPECT_EQ(dev.scaler.get_scale(), host.scaler.get_scale());
  EXPECT_EQ(dev.scaler.growth_tracker(), host.scaler.growth_tracker());
  for (size_t k = 0; k < dev.params.size(); ++k)
    EXPECT_LE(scaled_error(dev.params[k], host.params[k]), 1e-5) << "parameter " << k;
  EXPECT_EQ(dev.adamw->state(0).at("step").item<double>(), 6.0);  // 7 steps, 1 skipped
  EXPECT_TRUE(dev.adamw->state(0).at("step").is_cuda());         // counted on the device
  EXPECT_EQ(host.adamw->state(0).at("step").item<double>(), 6.0);
  const TensorDict sd = dev.scaler.state_dict(), sh = host.scaler.state_dict();
  EXPECT_EQ(sd.at("scale").item<double>(), sh.at("scale").item<double>());
  // A copy owns its device scale.
  amp::GradScaler copy = dev.scaler;
  copy.update(4.0);
  EXPECT_EQ(copy.get_scale(), 4.0);
  EXPECT_EQ(dev.scaler.get_scale(), host.scaler.get_scale());
}

}  // namespace
}  // namespace ddp::test
