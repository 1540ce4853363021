// Determinism of the CUDA kernels that avoid float atomics: LayerNorm's
// sliced dweight/dbias reduction (Note [CUDA LayerNorm kernels]) and the
// sorted embedding gradient (Note [Deterministic embedding gradient]) give
// the same bits on every run, and the embedding gradient the CPU's bits.
// Skipped without a GPU; the CPU-vs-CUDA value checks are in the
// op-consistency suite (layer_norm, embedding, cross_entropy entries).

#include "ddp/nn/functional/embedding.h"
#include "ddp/nn/functional/layer_norm.h"
#include "ddp/tensor/cuda.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

struct LnGrads {
  std::vector<double> dx, dw, db;
};

LnGrads layer_norm_grads(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& dy) {
  Tensor x = x0.detach().clone().set_requires_grad();
  Tensor w = w0.detach().clone().set_requires_grad();
  Tensor b = b0.detach().clone().set_requires_grad();
  F::layer_norm(x, {x.size(-1)}, w, b).backward(dy);
  return {values(x.grad().cpu()), values(w.grad().cpu()), values(b.grad().cpu())};
}

TEST(NnKernelsGpu, LayerNormGradientsAreBitwiseRepeatable) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int64_t cols : {768, 2050}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " cols " + std::to_string(cols));
      Generator gen(21);
      auto draw = [&](const Shape& shape) {  // drawn on the CPU, then moved and rounded
        return randn(shape, TensorOptions(DType::f32), &gen).to(Device::cuda(0), dt);
      };
      Tensor x = draw({4096, cols}), dy = draw({4096, cols});
      Tensor w = draw({cols}), b = draw({cols});
      const LnGrads a = layer_norm_grads(x, w, b, dy), c = layer_norm_grads(x, w, b, dy);
      EXPECT_EQ(a.dx, c.dx);
      EXPECT_EQ(a.dw, c.dw);
      EXPECT_EQ(a.db, c.db);
    }
  }
}

TEST(NnKernelsGpu, EmbeddingGradientIsTheCpusBits) {
  SKIP_WITHOUT_GPU();
  Generator gen(5);
  Tensor w_cpu = randn({50257, 64}, TensorOptions(DType::f32), &gen);
  // 8192 lookups in 300 rows: long runs of repeats, as for frequent tokens.
  Tensor idx = uniform({8192}, 0.0, 300.0, TensorOptions(DType::f32), &gen).to(DType::i64);
  Tensor dy = randn({8192, 64}, TensorOptions(DType::f32), &gen);
  auto grad = [&](Device d) {
    Tensor w = w_cpu.to(d).detach().set_requires_grad();
    F::embedding(idx.to(d), w).backward(dy.to(d));
    return values(w.grad().cpu());
  };
  const std::vector<double> cpu = grad(Device::cpu());
  const std::vector<double> gpu1 = grad(Device::cuda(0)), gpu2 = grad(Device::cuda(0));
  EXPECT_EQ(gpu1, gpu2);
  EXPECT_EQ(gpu1, cpu);  // the same f32 additions in the same order
}

}  // namespace
}  // namespace ddp::test
