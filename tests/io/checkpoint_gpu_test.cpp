// Checkpoints of a model and optimizer on a GPU: saved from the device,
// restored to the device or to the CPU with the same values, and a failed
// load that puts the device tensors back. Each test skips without a GPU.
#include <memory>
#include <string>

#include "ddp/io/async_checkpoint.h"
#include "ddp/io/checkpoint.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/cuda.h"
#include "io/io_test_util.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason()

std::shared_ptr<nn::Sequential> make_net() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(8, 2)});
}

std::vector<float> host_values(const Tensor& t) { return t.cpu().to_vector<float>(); }

void expect_same_values(const nn::TensorDict& a, const nn::TensorDict& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [k, t] : a) EXPECT_EQ(host_values(b.at(k)), host_values(t)) << k;
}

TEST(CheckpointGpu, SavedFromTheDeviceLoadsOnDeviceAndHost) {
  REQUIRE_GPU();
  ScratchDir dir;
  manual_seed(1);
  auto net = make_net();
  net->to(Device::cuda(0));
  optim::SGD opt(net->parameters(), 0.1, {.momentum = 0.9});
  for (int s = 0; s < 2; ++s) {
    Tensor x = randn({3, 4}).to(Device::cuda(0));
    opt.zero_grad();
    sum(net->forward(x)).backward();
    opt.step();
  }
  io::Checkpoint ckpt;
  ckpt.add("model", net).add("optimizer", opt);
  io::save_checkpoint(dir.path("ckpt"), ckpt, {.step = 2});

  manual_seed(2);
  auto on_gpu = make_net();
  on_gpu->to(Device::cuda(0));
  optim::SGD opt_gpu(on_gpu->parameters(), 0.1, {.momentum = 0.9});
  io::Checkpoint c1;
  c1.add("model", on_gpu).add("optimizer", opt_gpu);
  io::load_checkpoint(dir.path("ckpt"), c1);
  expect_same_values(on_gpu->state_dict(), net->state_dict());
  for (const auto& [k, t] : on_gpu->state_dict()) EXPECT_TRUE(t.is_cuda()) << k;
  EXPECT_TRUE(opt_gpu.state(0).at("momentum_buffer").is_cuda());

  auto on_cpu = make_net();
  optim::SGD opt_cpu(on_cpu->parameters(), 0.1, {.momentum = 0.9});
  io::Checkpoint c2;
  c2.add("model", on_cpu).add("optimizer", opt_cpu);
  io::load_checkpoint(dir.path("ckpt"), c2);
  expect_same_values(on_cpu->state_dict(), net->state_dict());
  EXPECT_FALSE(opt_cpu.state(0).at("momentum_buffer").is_cuda());
}

// The model on the device loads, a later section refuses: the device
// tensors get their values back and stay on the device.
TEST(CheckpointGpu, FailedLoadRestoresDeviceTensors) {
  REQUIRE_GPU();
  ScratchDir dir;
  manual_seed(1);
  auto net = make_net();
  io::Checkpoint ckpt;
  ckpt.add("model", net);
  ckpt.add(
      "other",
      [] {
        return nn::TensorDict{{"x", Tensor::ones({2})}};
      },
      [](const nn::TensorDict&) {});
  io::save_checkpoint(dir.path("ckpt"), ckpt);

  manual_seed(2);
  auto target = make_net();
  target->to(Device::cuda(0));
  nn::TensorDict before;
  for (const auto& [k, t] : target->state_dict()) before.insert(k, t.cpu());
  io::Checkpoint c;
  c.add("model", target);
  c.add(
      "other", [] { return nn::TensorDict{}; },
      [](const nn::TensorDict& d) {
        if (!d.empty()) DDP_THROW(ValueError, "other refuses");
      });
  EXPECT_DDP_ERROR(io::load_checkpoint(dir.path("ckpt"), c), ValueError, "other refuses");
  expect_same_values(target->state_dict(), before);
  for (const auto& [k, t] : target->state_dict()) EXPECT_TRUE(t.is_cuda()) << k;
}

// io::AsyncCheckpointer's snapshot of device tensors goes through pinned
// buffers with asynchronous copies (Note [Snapshot buffers]): the files hold
// the values at save(), even though the device tensors change right after.
TEST(CheckpointGpu, AnAsynchronousSaveSnapshotsTheDeviceStateAtSave) {
  REQUIRE_GPU();
  ScratchDir dir;
  manual_seed(3);
  auto net = make_net();
  net->to(Device::cuda(0));
  const nn::TensorDict before = net->state_dict();
  std::vector<std::vector<float>> want;
  for (const auto& [k, t] : before) want.push_back(host_values(t));
  io::Checkpoint ckpt;
  ckpt.add("model", net);
  io::AsyncCheckpointer saver;
  for (int round = 0; round < 2; ++round) {  // the second reuses the pinned buffers
    saver.save(dir.path("ckpt"), ckpt, {.step = round});
    saver.wait();
  }
  saver.save(dir.path("ckpt"), ckpt, {.step = 2});
  {
    NoGradGuard no_grad;
    for (Tensor t : net->parameters()) t.fill_(7.0);  // the next step, at once
  }
  saver.wait();

  auto loaded = make_net();
  io::Checkpoint c;
  c.add("model", loaded);
  EXPECT_EQ(io::load_checkpoint(dir.path("ckpt"), c).step, 2);
  size_t i = 0;
  for (const auto& [k, t] : loaded->state_dict()) EXPECT_EQ(host_values(t), want[i++]) << k;
}

}  // namespace
}  // namespace ddp::test
