// F::linear_gelu_linear on CUDA (Note [linear_gelu_linear]): the fused
// backward (BGRADB for dW2/db2, one DGELU_BGRAD GEMM for dh/db1, then dW1
// and dX) against the CPU's composition at GPT-2 MLP sizes, and the
// linear_dgelu_bgrad kernel itself: found by cuBLASLt, one plan in the
// cache, and equal to the composed dh and db1. Skipped without a GPU.

#include <gtest/gtest.h>

#include <iostream>

#include "ddp/nn/functional/activation.h"
#include "ddp/nn/functional/linear.h"
#include "ddp/tensor/cuda.h"
#include "kernel_list.h"
#include "nn/nn_test_util.h"
#include "nn/scaled_error.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

Tensor values(const Shape& shape, uint64_t seed, DType dt, Device dev, double scale = 1.0) {
  Generator gen(seed);
  return mul(randn(shape, DType::f32, &gen), scale).to(dt).to(dev);
}

Tensor cpu_leaf(const Tensor& t) { return t.detach().cpu().to(DType::f32).set_requires_grad(); }

// Output and all five gradients of the CUDA op against the CPU composition
// in f32 on the same rounded inputs.
void check_against_cpu(DType dt, int64_t rows, int64_t in, int64_t hid, double tol) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " hid=" + std::to_string(hid));
  const Device cuda{DeviceType::CUDA, 0};
  Tensors g{values({rows, in}, 1, dt, cuda), values({hid, in}, 2, dt, cuda, 0.05),
            values({hid}, 3, dt, cuda), values({in, hid}, 4, dt, cuda, 0.02),
            values({in}, 5, dt, cuda)};
  Tensors c;
  for (Tensor& t : g) {
    t.set_requires_grad();
    c.push_back(cpu_leaf(t));
  }
  Tensor dz = values({rows, in}, 6, dt, cuda);
  Tensor z = F::linear_gelu_linear(g[0], g[1], g[2], g[3], g[4]);
  Tensor zc = F::linear(F::linear_gelu(c[0], c[1], c[2]), c[3], c[4]);
  EXPECT_EQ(z.dtype(), dt);
  EXPECT_LT(scaled_error(z, zc), tol);
  z.backward(dz);
  zc.backward(dz.cpu().to(DType::f32));
  const char* names[] = {"dx", "dw1", "db1", "dw2", "db2"};
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(g[i].grad().defined()) << names[i];
    EXPECT_LT(scaled_error(g[i].grad(), c[i].grad()), tol) << names[i];
  }
}

TEST(LinearGeluLinearGpu, MatchesCpuAtGpt2Sizes) {
  SKIP_WITHOUT_GPU();
  check_against_cpu(DType::f32, 512, 768, 3072, 1e-4);
  check_against_cpu(DType::bf16, 512, 768, 3072, 2e-2);
  check_against_cpu(DType::bf16, 64, 40, 6, 2e-2);  // composed: hid % 8 != 0
}

// The DGELU_BGRAD GEMM directly: cuBLASLt takes it (a new plan: one miss,
// then a hit) and its dh and db1 equal (dz·w2)∘gelu'(h) and Σ_rows dh
// computed on the CPU.
TEST(LinearGeluLinearGpu, DgeluBgradKernelRunsThroughThePlanCache) {
  SKIP_WITHOUT_GPU();
  const Device cuda{DeviceType::CUDA, 0};
  for (DType dt : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    // 520 rows: a shape no other test uses, so the first call must miss.
    const int64_t rows = 520, out = 768, hid = 3072;
    Tensor dz = values({rows, out}, 7, dt, cuda), w2 = values({out, hid}, 8, dt, cuda, 0.02);
    Tensor h = values({rows, hid}, 9, dt, cuda);
    const TensorOptions o = TensorOptions(dt).device(cuda);
    Tensor dh = Tensor::empty({rows, hid}, o), db = Tensor::empty({hid}, o);
    const F::LinearCacheStats s0 = F::linear_cache_stats(DeviceType::CUDA);
    const bool taken = kernels::call<kernels::linear_dgelu_bgrad>(cuda, dz, w2, h, dh, db);
    const F::LinearCacheStats s1 = F::linear_cache_stats(DeviceType::CUDA);
    EXPECT_EQ(s1.misses, s0.misses + 1) << "no new plan for DGELU_BGRAD";
    // bf16 is the case GPT-2 training runs and must be fused; cuBLASLt's
    // f32 support for the epilogue is not documented per GPU, so a declined
    // f32 is reported (the op then composes: MatchesCpuAtGpt2Sizes covers it).
    if (dt == DType::bf16) ASSERT_TRUE(taken) << "cuBLASLt declined DGELU_BGRAD in bf16";
    if (!taken) {
      std::cout << "note: cuBLASLt declined DGELU_BGRAD in " << dtype_name(dt) << "\n";
      continue;
    }
    Tensor dh2 = Tensor::empty({rows, hid}, o), db2 = Tensor::empty({hid}, o);
    ASSERT_TRUE(kernels::call<kernels::linear_dgelu_bgrad>(cuda, dz, w2, h, dh2, db2));
    const F::LinearCacheStats s2 = F::linear_cache_stats(DeviceType::CUDA);
    EXPECT_EQ(s2.misses, s1.misses) << "the DGELU_BGRAD plan was not cached";
    EXPECT_EQ(s2.hits, s1.hits + 1);

    // The CPU: dh = gelu_tanh'(h)·(dz·w2) through autograd of gelu.
    Tensor hc = cpu_leaf(h);
    Tensor dy = matmul(dz.cpu().to(DType::f32), w2.cpu().to(DType::f32));
    F::gelu(hc, "tanh").backward(dy);
    Tensor want_dh = hc.grad();
    EXPECT_LT(scaled_error(dh, want_dh), dt == DType::f32 ? 1e-4 : 2e-2) << "dh";
    EXPECT_LT(scaled_error(db, sum(want_dh, {0})), dt == DType::f32 ? 1e-4 : 2e-2) << "db";
  }
}

}  // namespace
}  // namespace ddp::test
