// The cuBLASLt linear kernels on CUDA (Note [cuBLASLt linear]): the plan
// cache's hits and misses, linear_gelu's fused forward and backward against
// the CPU's composition, and the composed fallback for out % 8 != 0;
// skipped without a GPU. The op-consistency suite compares the GPT-2 sized
// case (4096 × 768 → 3072) in every dtype.

#include <gtest/gtest.h>

#include "ddp/nn/functional/activation.h"
#include "ddp/nn/functional/linear.h"
#include "ddp/tensor/cuda.h"
#include "nn/nn_test_util.h"
#include "nn/scaled_error.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

Tensor values(const Shape& shape, uint64_t seed, DType dt, Device dev) {
  Generator gen(seed);
  return randn(shape, DType::f32, &gen).to(dt).to(dev);
}

TEST(LinearGpu, PlanCacheHitsOnTheSecondCall) {
  SKIP_WITHOUT_GPU();
  const Device cuda{DeviceType::CUDA, 0};
  // A shape no other test uses, so the first call must miss.
  Tensor x = values({37, 72}, 1, DType::bf16, cuda), w = values({136, 72}, 2, DType::bf16, cuda);
  Tensor b = values({136}, 3, DType::bf16, cuda);
  const F::LinearCacheStats s0 = F::linear_cache_stats(DeviceType::CUDA);
  Tensor y1 = F::linear(x, w, b);
  const F::LinearCacheStats s1 = F::linear_cache_stats(DeviceType::CUDA);
  EXPECT_EQ(s1.misses, s0.misses + 1);
  EXPECT_GE(s1.entries, 1);
  Tensor y2 = F::linear(x, w, b);
  const F::LinearCacheStats s2 = F::linear_cache_stats(DeviceType::CUDA);
  EXPECT_EQ(s2.misses, s1.misses) << "the same GEMM asked the heuristic again";
  EXPECT_EQ(s2.hits, s1.hits + 1);
  EXPECT_EQ(scaled_error(y2, y1), 0.0);
  // Another epilogue (no bias) is another plan.
  F::linear(x, w);
  EXPECT_EQ(F::linear_cache_stats(DeviceType::CUDA).misses, s2.misses + 1);
  // And the result is the CPU's.
  Tensor want = F::linear(x.cpu().to(DType::f32), w.cpu().to(DType::f32), b.cpu().to(DType::f32));
  EXPECT_LT(scaled_error(y1, want), 1e-2);
}

// linear_gelu on CUDA (fused when out % 8 == 0, composed otherwise) against
// the CPU in f32 on the same rounded inputs: output and all gradients.
void check_linear_gelu(DType dt, int64_t rows, int64_t in, int64_t out, double tol) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " out=" + std::to_string(out));
  const Device cuda{DeviceType::CUDA, 0};
  Tensor x = values({rows, in}, 4, dt, cuda).set_requires_grad();
  Tensor w = mul(values({out, in}, 5, dt, cuda), 0.05).detach().set_requires_grad();
  Tensor b = values({out}, 6, dt, cuda).set_requires_grad();
  Tensor dy = values({rows, out}, 7, dt, cuda);
  Tensor xc = x.detach().cpu().to(DType::f32).set_requires_grad();
  Tensor wc = w.detach().cpu().to(DType::f32).set_requires_grad();
  Tensor bc = b.detach().cpu().to(DType::f32).set_requires_grad();
  Tensor y = F::linear_gelu(x, w, b);
  Tensor yc = F::gelu(F::linear(xc, wc, bc), "tanh");
  EXPECT_EQ(y.dtype(), dt);
  EXPECT_LT(scaled_error(y, yc), tol);
  y.backward(dy);
  yc.backward(dy.cpu().to(DType::f32));
  EXPECT_LT(scaled_error(x.grad(), xc.grad()), tol) << "dx";
  EXPECT_LT(scaled_error(w.grad(), wc.grad()), tol) << "dw";
  EXPECT_LT(scaled_error(b.grad(), bc.grad()), tol) << "db";
}

TEST(LinearGpu, LinearGeluMatchesCpu) {
  SKIP_WITHOUT_GPU();
  check_linear_gelu(DType::f32, 256, 768, 3072, 1e-4);
  check_linear_gelu(DType::bf16, 256, 768, 3072, 2e-2);
  check_linear_gelu(DType::f16, 256, 768, 3072, 4e-3);
  check_linear_gelu(DType::bf16, 64, 40, 6, 2e-2);  // composed: out % 8 != 0
}

// The fused path runs one GEMM with the GELU epilogue: it must be a plan of
// its own (a miss), then hit.
TEST(LinearGpu, LinearGeluUsesThePlanCache) {
  SKIP_WITHOUT_GPU();
  const Device cuda{DeviceType::CUDA, 0};
  Tensor x = values({29, 48}, 8, DType::bf16, cuda), w = values({152, 48}, 9, DType::bf16, cuda);
  Tensor b = values({152}, 10, DType::bf16, cuda);
  const F::LinearCacheStats s0 = F::linear_cache_stats(DeviceType::CUDA);
  F::linear_gelu(x, w, b);
  const F::LinearCacheStats s1 = F::linear_cache_stats(DeviceType::CUDA);
  EXPECT_EQ(s1.misses, s0.misses + 1);
  F::linear_gelu(x, w, b);
  EXPECT_EQ(F::linear_cache_stats(DeviceType::CUDA).hits, s1.hits + 1);
}

}  // namespace
}  // namespace ddp::test
