// The kernel registry (Note [Kernel registry]): what each build registers,
// and the error for a kernel a device lacks.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "ddp/config.h"
#include "ddp/tensor/cuda.h"
#include "kernel_list.h"

namespace ddp {
namespace {

std::set<std::string> registered_for(DeviceType d) {
  std::set<std::string> out;
  for (const kernels::KernelEntry& e : kernels::registered_kernels())
    if (e.device == d) out.insert(e.op);
  return out;
}

// Every kernel op of kernels/kernel_list.h that the CPU implements (linear
// and attention have only fused CUDA kernels; the CPU composes them).
const std::set<std::string> kCpuKernels = {
    "softmax_forward",        "softmax_backward",        "conv2d_forward",
    "conv2d_backward_data",   "conv2d_backward_weight",  "conv2d_cache_stats",
    "conv2d_copy_layout",
    "batch_norm_train_forward", "batch_norm_eval_forward", "batch_norm_backward",
    "max_pool2d_forward",     "max_pool2d_backward",     "max_pool2d_forward_nhwc",
    "max_pool2d_backward_nhwc", "layer_norm_forward",
    "layer_norm_backward",    "foreach_sgd_step",        "foreach_adamw_step",
    "foreach_pow_sum",        "foreach_mul",             "foreach_unscale",
    "amp_update_scale",       "embedding_forward",       "embedding_backward",
    "cross_entropy_forward",  "cross_entropy_backward",
    "batch_norm_add_relu_train_forward", "batch_norm_add_relu_eval_forward",
    "batch_norm_add_relu_backward"};

TEST(KernelRegistry, TheCpuHasEveryCpuKernel) {
  EXPECT_EQ(registered_for(DeviceType::CPU), kCpuKernels);
  EXPECT_TRUE(kernels::has_kernel<kernels::conv2d_forward>(DeviceType::CPU));
  EXPECT_FALSE(kernels::has_kernel<kernels::attention_forward>(DeviceType::CPU));
}

TEST(KernelRegistry, CudaRegistrationsFollowTheBuild) {
  const std::set<std::string> cuda = registered_for(DeviceType::CUDA);
  if (!cuda::is_compiled()) {
    EXPECT_TRUE(cuda.empty()) << "a build without CUDA has no CUDA registrations";
    return;
  }
  std::set<std::string> expected = {"softmax_forward",     "softmax_backward",
                                    "max_pool2d_forward",  "max_pool2d_backward",
                                    "layer_norm_forward",  "layer_norm_backward",
                                    "attention_supports",  "attention_forward",
                                    "attention_backward",  "attention_cache_stats",
                                    "foreach_sgd_step",
                                    "foreach_adamw_step",  "foreach_pow_sum",
                                    "foreach_mul",         "linear_forward",
                                    "foreach_unscale",     "amp_update_scale",
                                    "linear_gelu_forward", "linear_backward_weight", "linear_dgelu_bgrad",
                                    "linear_cache_stats",
                                    "max_pool2d_forward_nhwc", "max_pool2d_backward_nhwc",
                                    "embedding_forward",   "embedding_backward",
                                    "cross_entropy_forward", "cross_entropy_backward"};
#if DDP_HAVE_CUDNN
  for (const char* op : {"conv2d_forward", "conv2d_backward_data", "conv2d_backward_weight",
                         "conv2d_cache_stats", "conv2d_bias_relu_forward",
                         "batch_norm_train_forward",
                         "batch_norm_eval_forward", "batch_norm_backward",
                         "batch_norm_add_relu_train_forward", "batch_norm_add_relu_eval_forward",
                         "batch_norm_add_relu_backward"})
    expected.insert(op);
#endif
  EXPECT_EQ(cuda, expected);
}

TEST(KernelRegistry, EachSlotIsRegisteredOnce) {
  std::set<std::pair<std::string, int>> seen;
  for (const kernels::KernelEntry& e : kernels::registered_kernels())
    EXPECT_TRUE(seen.insert({e.op, int(e.device)}).second) << e.op << " registered twice";
}

TEST(KernelRegistry, AMissingKernelNamesTheOpAndTheDevice) {
  Tensor t = Tensor::zeros({1, 1, 4});
  try {
    kernels::call<kernels::attention_forward>(Device::cpu(), t, t, t, t, t, 1.0f, false);
    FAIL() << "expected NotImplementedError";
  } catch (const NotImplementedError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("attention_forward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
  }
  if (!cuda::is_compiled()) {
    try {
      kernels::find_kernel<kernels::softmax_forward>(DeviceType::CUDA);
      FAIL() << "expected NotImplementedError";
    } catch (const NotImplementedError& e) {
      EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos) << e.what();
    }
  }
}

TEST(KernelRegistry, CallRunsTheRegisteredKernel) {
  Tensor in = Tensor::from_vector(std::vector<float>{0.0f, 0.0f}, {1, 2});
  Tensor out = Tensor::empty({1, 2});
  kernels::call<kernels::softmax_forward>(Device::cpu(), in, out, false);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
}

}  // namespace
}  // namespace ddp
