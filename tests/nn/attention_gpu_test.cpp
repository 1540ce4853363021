// The fused CUDA attention (Note [Flash attention kernels]) against the
// reference path on the same GPU, forward and backward; skipped without a GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ddp/nn/functional/attention.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"

using namespace ddp;
using ddp::test::scaled_error;
namespace F = ddp::nn::functional;

namespace {

struct Case {
  int64_t B, H, T, S, D;
  bool causal;
  DType dtype;
  double tol;  // on max|error| / max(1, max|reference|)
};

void run_case(const Case& c) {
  const Device dev = Device::cuda(0);
  Generator gen(42);
  // Inputs drawn in f32 on the CPU, so the fused and the reference path see
  // the same values (the reference runs in f32 on the GPU).
  auto draw = [&](int64_t rows) {
    return randn({c.B, c.H, rows, c.D}, {}, &gen).to(dev);
  };
  Tensor q32 = draw(c.T), k32 = draw(c.S), v32 = draw(c.S), dy32 = draw(c.T);
  auto leaf = [&](const Tensor& t) { return t.to(c.dtype).detach().set_requires_grad(); };
  Tensor q = leaf(q32), k = leaf(k32), v = leaf(v32);
  Tensor y = F::scaled_dot_product_attention(q, k, v, c.causal);
  y.backward(dy32.to(c.dtype));
  Tensor qr = q32.detach().set_requires_grad(), kr = k32.detach().set_requires_grad(),
         vr = v32.detach().set_requires_grad();
  Tensor yr = F::scaled_dot_product_attention_reference(qr, kr, vr, c.causal);
  yr.backward(dy32);
  const std::string what = std::string(dtype_name(c.dtype)) + (c.causal ? " causal" : " full") +
                           " D=" + std::to_string(c.D) + " T=" + std::to_string(c.T);
  EXPECT_LE(scaled_error(y, yr), c.tol) << what << " out";
  EXPECT_LE(scaled_error(q.grad(), qr.grad()), c.tol) << what << " dq";
  EXPECT_LE(scaled_error(k.grad(), kr.grad()), c.tol) << what << " dk";
  EXPECT_LE(scaled_error(v.grad(), vr.grad()), c.tol) << what << " dv";
}

TEST(AttentionGpu, FusedMatchesReference) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  // f32: the only differences are summation order and expf, ~1e-5. bf16/f16:
  // inputs and outputs rounded to 8 / 11 mantissa bits.
  for (bool causal : {true, false})
    for (int64_t D : {16, 64, 128}) {
      run_case({2, 3, 77, causal ? 77 : 50, D, causal, DType::f32, 2e-5});
      run_case({1, 2, 130, causal ? 130 : 33, D, causal, DType::bf16, 3e-2});
      run_case({1, 2, 65, causal ? 65 : 65, D, causal, DType::f16, 5e-3});
    }
}

TEST(AttentionGpu, UnsupportedHeadSizeFallsBackToReference) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  run_case({1, 1, 9, 9, 24, true, DType::f32, 1e-6});  // D=24: the reference path on both sides
}

}  // namespace
