// Models on the GPU in f32, bf16 and f16 against the same model on the CPU in
// f32 (same weights); skipped without a GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ddp/nn/models/gpt.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"

using namespace ddp;
using ddp::test::scaled_error;
using namespace ddp::nn::models;

namespace {

// Tolerances on max|error| / max(1, max|cpu|): f32 differs only in summation
// order (cuDNN/cuBLAS algorithms); bf16/f16 round every activation.
double tolerance(DType d) { return d == DType::f32 ? 1e-3 : d == DType::bf16 ? 1e-1 : 3e-2; }

template <class MakeModel>
void compare(const char* what, MakeModel make, const Tensor& input) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    auto cpu = make();
    auto gpu = make();
    gpu->load_state_dict(cpu->state_dict());
    cpu->eval();
    gpu->eval();
    gpu->to(Device::cuda(0), d);
    Tensor x = is_floating(input.dtype()) ? input.to(Device::cuda(0), d) : input.cuda();
    Tensor y = gpu->forward(x);
    EXPECT_TRUE(y.is_cuda());
    EXPECT_LE(scaled_error(y, cpu->forward(input)), tolerance(d)) << what << " " << dtype_name(d);
    sum(y).backward();  // the backward runs on the GPU in this dtype
    for (const auto& [name, p] : gpu->named_parameters())
      ASSERT_TRUE(p.grad().defined()) << what << " " << name;
  }
}

TEST(ModelsGpu, ResNet20MatchesCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  compare("resnet20", [] { return resnet20({1, 10}); }, randn({4, 1, 32, 32}));
}

TEST(ModelsGpu, SmallGptMatchesCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  GPTConfig c;
  c.vocab_size = 101;
  c.block_size = 64;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;  // head size 16: the fused attention kernel
  Tensor tokens = Tensor::from_vector<int64_t>(std::vector<int64_t>(2 * 64, 7), {2, 64});
  compare("gpt", [&] { return std::make_shared<GPT>(c); }, tokens);
}

}  // namespace
