// The fused CUDA attention (Note [Flash attention kernels]) at the sizes
// attention_gpu_test.cpp stays below (label gpu; skipped without a GPU):
//   - long sequences, T = 1024 and 2048, head sizes 64 and 128, causal and
//     full, f32 / bf16 / f16;
//   - more than 65,535 (batch × head) rows, the limit of a CUDA grid's y and
//     z dimensions, so a kernel that puts B·H there would fail to launch or
//     skip rows.
// Each against the reference path (Note [Attention reference path]) in f32
// on the same GPU, forward and backward. f16/bf16 run cuDNN's fused attention
// where the build and the GPU have it (Note [Attention paths on CUDA]), so
// the many-rows cases check its grid too; the f32 case keeps the hand
// kernel's.
//
// Tolerances on max|error| / max(1, max|reference|): f32 1e-4 (summation
// order over 1,024+ keys, expf); f16 1e-2 and bf16 4e-2, a little above
// attention_gpu_test.cpp's (5e-3, 3e-2) because dk and dv now sum 1,024
// rounded terms per element.
#include <gtest/gtest.h>

#include <string>

#include "ddp/nn/functional/attention.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

struct Case {
  int64_t B, H, T, D;
  bool causal;
  DType dtype;
  double tol;
};

void expect_fused_matches_reference(const Case& c) {
  const Device dev = Device::cuda(0);
  const std::string what = std::to_string(c.B) + "x" + std::to_string(c.H) + " T=" +
                           std::to_string(c.T) + " D=" + std::to_string(c.D) + " " +
                           dtype_name(c.dtype) + (c.causal ? " causal" : " full");
  SCOPED_TRACE(what);
  manual_seed(uint64_t(c.T * 131 + c.D));
  const TensorOptions f32_cuda = TensorOptions(kFloat32).device(dev);
  const Shape shape{c.B, c.H, c.T, c.D};
  Tensor q32 = randn(shape, f32_cuda), k32 = randn(shape, f32_cuda), v32 = randn(shape, f32_cuda),
         dy32 = randn(shape, f32_cuda);
  auto leaf = [&](const Tensor& t) { return t.to(c.dtype).detach().set_requires_grad(); };
  Tensor q = leaf(q32), k = leaf(k32), v = leaf(v32);
  Tensor y = F::scaled_dot_product_attention(q, k, v, c.causal);
  ASSERT_EQ(y.shape(), shape);
  y.backward(dy32.to(c.dtype));

  // The reference sees the same rounded inputs, computed in f32.
  auto ref_leaf = [&](const Tensor& t) { return t.to(kFloat32).detach().set_requires_grad(); };
  Tensor qr = ref_leaf(q), kr = ref_leaf(k), vr = ref_leaf(v);
  Tensor yr = F::scaled_dot_product_attention_reference(qr, kr, vr, c.causal);
  yr.backward(dy32.to(c.dtype).to(kFloat32));

  EXPECT_LE(scaled_error(y, yr), c.tol) << "out";
  EXPECT_LE(scaled_error(q.grad(), qr.grad()), c.tol) << "dq";
  EXPECT_LE(scaled_error(k.grad(), kr.grad()), c.tol) << "dk";
  EXPECT_LE(scaled_error(v.grad(), vr.grad()), c.tol) << "dv";
}

TEST(AttentionLargeGpu, LongSequencesHeadSizes64And128) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  for (int64_t D : {64, 128})
    for (bool causal : {true, false}) {
      expect_fused_matches_reference({2, 4, 1024, D, causal, kFloat32, 1e-4});
      expect_fused_matches_reference({2, 4, 1024, D, causal, kBFloat16, 4e-2});
      expect_fused_matches_reference({2, 4, 1024, D, causal, kFloat16, 1e-2});
    }
  // Longer still, and a length that is no multiple of any tile.
  expect_fused_matches_reference({1, 2, 2048, 64, true, kBFloat16, 4e-2});
  expect_fused_matches_reference({1, 2, 1100, 128, false, kFloat16, 1e-2});
}

TEST(AttentionLargeGpu, MoreThan65535BatchHeadRows) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  // B·H = 4,100 × 16 = 65,600 > 65,535; short sequences keep it ~0.3 GB a tensor.
  for (int64_t D : {64, 128}) {
    expect_fused_matches_reference({4100, 16, 16, D, true, kBFloat16, 4e-2});
    expect_fused_matches_reference({4100, 16, 16, D, false, kFloat16, 1e-2});
  }
  expect_fused_matches_reference({65537, 1, 8, 64, true, kFloat32, 1e-4});
}

}  // namespace
}  // namespace ddp::test
