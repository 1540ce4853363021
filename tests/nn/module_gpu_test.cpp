// Modules on a GPU: to(cuda) and back with parameter identity, gradients
// converted with them, training steps on the device, loading a CPU state
// dict into a GPU model and saving a GPU model. Each test skips without a GPU.
#include <memory>
#include <string>
#include <vector>

#include "ddp/io/safetensors.h"
#include "ddp/tensor/cuda.h"
#include "io/io_test_util.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason()

TEST(ModuleGpu, ToCudaAndBackKeepsParameterIdentity) {
  REQUIRE_GPU();
  manual_seed(0);
  auto mlp = make_mlp();
  Tensor w = mlp->at<TestLinear>(0)->weight;
  TensorImpl* impl = w.impl();
  std::vector<double> before = values(w);
  sum(mlp->forward(randn({4, 4}))).backward();
  std::vector<double> grad_before = values(w.grad());

  mlp->to(Device::cuda(0));
  for (const auto& [name, t] : mlp->state_dict()) EXPECT_TRUE(t.is_cuda()) << name;
  for (const auto& [name, t] : mlp->named_buffers()) EXPECT_TRUE(t.is_cuda()) << name;
  EXPECT_EQ(w.impl(), impl);
  EXPECT_TRUE(w.is_cuda() && w.is_leaf() && w.requires_grad());
  EXPECT_TRUE(w.grad().is_cuda());
  EXPECT_EQ(values(w), before);
  EXPECT_EQ(values(w.grad()), grad_before);
  EXPECT_EQ(mlp->at<TestBatchNorm1d>(1)->num_batches_tracked.dtype(), kInt64);

  // Training on the device accumulates into the moved gradient.
  mlp->zero_grad();
  sum(mlp->forward(randn({4, 4}, TensorOptions().device(Device::cuda(0))))).backward();
  EXPECT_TRUE(w.grad().is_cuda());

  mlp->to(Device::cpu(), kFloat64);
  EXPECT_EQ(w.impl(), impl);
  EXPECT_EQ(w.device(), Device::cpu());
  EXPECT_EQ(w.dtype(), kFloat64);
  EXPECT_EQ(w.grad().dtype(), kFloat64);
}

TEST(ModuleGpu, StateDictCrossesDevices) {
  REQUIRE_GPU();
  ScratchDir dir;
  manual_seed(1);
  auto cpu_model = make_mlp();
  manual_seed(2);
  auto gpu_model = make_mlp();
  gpu_model->to(Device::cuda(0), kBFloat16);
  gpu_model->load_state_dict(cpu_model->state_dict());  // CPU f32 into GPU bf16
  EXPECT_TRUE(gpu_model->at<TestLinear>(0)->weight.is_cuda());
  EXPECT_EQ(gpu_model->at<TestLinear>(0)->weight.dtype(), kBFloat16);

  io::save_state_dict(dir.path("gpu.safetensors"), *gpu_model);  // copied to the host per tensor
  nn::TensorDict file = io::load_safetensors(dir.path("gpu.safetensors"));
  EXPECT_EQ(file["0.weight"].device(), Device::cpu());
  EXPECT_EQ(file["0.weight"].dtype(), kBFloat16);
  EXPECT_EQ(values(file["0.weight"]), values(gpu_model->at<TestLinear>(0)->weight));
}

}  // namespace
}  // namespace ddp::test
