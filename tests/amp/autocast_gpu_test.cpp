// amp::Autocast on CUDA: the policy's output dtypes on the GPU kernels
// (cuBLASLt linear, cuDNN conv and batch norm, fused attention), scopes of
// one device type leaving the other alone, master weights and the cache on
// the GPU, and a small model under autocast on the GPU against the same
// model under autocast on the CPU and against f32; skipped without a GPU.
//
// Tolerances, in units of u (2^-8 bf16, 2^-11 f16; see autocast_test.cpp):
// CPU and GPU under autocast round the same inputs the same way and differ
// only in accumulation order and in where an intermediate lands between
// two 16-bit values, at most a couple of u per layer; 8u for two layers.

#include <gtest/gtest.h>

#include "ddp/amp/autocast.h"
#include "ddp/nn/functional/attention.h"
#include "ddp/nn/functional/batch_norm.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/layer_norm.h"
#include "ddp/nn/functional/linear.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/nn.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;
using amp::Autocast;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

double unit_roundoff(DType dt) { return dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048; }

Tensor on_gpu(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, {}, &gen).cuda();
}

TEST(AutocastGpu, OutputDTypesPerCategory) {
  SKIP_WITHOUT_GPU();
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(low));
    Tensor x = on_gpu({4, 16}, 1), w = on_gpu({8, 16}, 2), b = on_gpu({8}, 3);
    Tensor img = on_gpu({2, 3, 6, 6}, 4), k = on_gpu({4, 3, 3, 3}, 5);
    Tensor q = on_gpu({1, 2, 8, 16}, 6);
    Tensor target = Tensor::zeros({4}, DType::i64).cuda();
    Autocast on(DeviceType::CUDA, low);
    Tensor y = F::linear(x, w, b);
    EXPECT_TRUE(y.is_cuda());
    EXPECT_EQ(y.dtype(), low);
    EXPECT_EQ(matmul(x, w.t()).dtype(), low);
    Tensor c = F::conv2d(img, k, Tensor(), {.padding = 1});
    EXPECT_EQ(c.dtype(), low);
    EXPECT_EQ(F::scaled_dot_product_attention(q, q, q, true).dtype(), low);  // the fused kernel
    Tensor gamma = Tensor::ones({4}).cuda(), beta = Tensor::zeros({4}).cuda();
    EXPECT_EQ(F::batch_norm(c, Tensor(), Tensor(), gamma, beta, true).dtype(), low);  // keep_input
    EXPECT_EQ(F::layer_norm(y, {8}).dtype(), DType::f32);
    EXPECT_EQ(softmax(y).dtype(), DType::f32);
    EXPECT_EQ(sum(y).dtype(), DType::f32);
    EXPECT_EQ(F::cross_entropy(y, target).dtype(), DType::f32);
  }
}

TEST(AutocastGpu, EachDeviceTypeHasItsOwnScope) {
  SKIP_WITHOUT_GPU();
  Tensor x = on_gpu({4, 16}, 7), w = on_gpu({8, 16}, 8);
  {
    Autocast cpu(DeviceType::CPU, DType::bf16);
    EXPECT_EQ(F::linear(x, w).dtype(), DType::f32);               // a CUDA op: untouched
    EXPECT_EQ(F::linear(x.cpu(), w.cpu()).dtype(), DType::bf16);  // a CPU op: cast
  }
  {
    Autocast gpu(DeviceType::CUDA, DType::bf16);
    EXPECT_EQ(F::linear(x, w).dtype(), DType::bf16);
    EXPECT_EQ(F::linear(x.cpu(), w.cpu()).dtype(), DType::f32);
  }
}

TEST(AutocastGpu, MasterWeightsGradientsAndCache) {
  SKIP_WITHOUT_GPU();
  Tensor w = on_gpu({8, 16}, 9).set_requires_grad();
  Tensor x = on_gpu({4, 16}, 10);
  Tensor loss;
  {
    Autocast on(DeviceType::CUDA, DType::f16);
    const int64_t misses = amp::autocast_cache_stats().misses;
    loss = sum(F::linear(x, w)) + sum(F::linear(x * 2.0, w));
    EXPECT_EQ(amp::autocast_cache_stats().misses, misses + 1);
  }
  EXPECT_EQ(amp::autocast_cache_stats().entries, 0);
  EXPECT_EQ(loss.dtype(), DType::f32);
  loss.backward();
  EXPECT_EQ(w.dtype(), DType::f32);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().is_cuda());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
}

struct Result {
  Tensor logits, loss;
  Tensors grads;
};

Result run(nn::Sequential& net, const Tensor& x, const Tensor& target, DeviceType type,
           std::optional<DType> low) {
  net.zero_grad();
  Result r;
  {
    std::optional<Autocast> scope;
    if (low) scope.emplace(type, *low);
    r.logits = net(x);
    r.loss = F::cross_entropy(r.logits, target);
  }
  r.loss.backward();
  for (const Tensor& p : net.parameters()) r.grads.push_back(p.grad().cpu());
  return r;
}

TEST(AutocastGpu, ConvNetMatchesCpuAutocastAndF32) {
  SKIP_WITHOUT_GPU();
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(low));
    const double u = unit_roundoff(low);
    manual_seed(11);
    nn::Sequential net({std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1),
                        std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(),
                        std::make_shared<nn::Linear>(8, 4)});
    Generator gen(11);
    Tensor x = randn({4, 3, 6, 6}, {}, &gen);
    Tensor target = Tensor::from_vector<int64_t>({0, 1, 2, 3}, {4});
    Result cpu = run(net, x, target, DeviceType::CPU, low);
    net.to(Device::cuda(0));
    Result gpu = run(net, x.cuda(), target.cuda(), DeviceType::CUDA, low);
    Result f32 = run(net, x.cuda(), target.cuda(), DeviceType::CUDA, std::nullopt);
    EXPECT_EQ(gpu.logits.dtype(), low);
    EXPECT_EQ(gpu.loss.dtype(), DType::f32);
    EXPECT_LE(scaled_error(gpu.logits.cpu(), cpu.logits), 8 * u);
    EXPECT_LE(scaled_error(gpu.logits, f32.logits), 8 * u);
    for (size_t i = 0; i < gpu.grads.size(); ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ(gpu.grads[i].dtype(), DType::f32);
      EXPECT_LE(scaled_error(gpu.grads[i], cpu.grads[i], 1e-3), 16 * u);
      EXPECT_LE(scaled_error(gpu.grads[i], f32.grads[i], 1e-3), 16 * u);
    }
  }
}

}  // namespace
}  // namespace ddp::test
