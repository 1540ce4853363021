// GradScaler on CUDA gradients against the same run on the CPU: the fused
// unscale + inf/NaN check (one launch per dtype) and the scale sequence;
// skipped without a GPU. Unscaling multiplies by a power of two, so the GPU
// and CPU gradients agree exactly.
#include <gtest/gtest.h>

#include <cmath>

#include "ddp/amp/grad_scaler.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"

namespace ddp::test {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

// count gradients of mixed dtypes (f32, bf16, f64) and sizes, on the CPU.
Tensors random_grads(int count, uint64_t seed) {
  Generator gen(seed);
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f64};
  Tensors out;
  for (int k = 0; k < count; ++k)
    out.push_back(mul(randn({1 + (k * 7919) % 40000}, DType::f32, &gen), 1024.0).to(dtypes[k % 3]));
  return out;
}

struct ScaledRun {
  Tensors params;
  std::unique_ptr<optim::SGD> opt;
  amp::GradScaler scaler{{.init_scale = 1024, .growth_interval = 2}};
};

// One step of run r with gradients g; bad_at >= 0 puts an inf or NaN at the
// last element of gradient bad_at.
bool step(ScaledRun& r, const Tensors& g, int bad_at, double bad) {
  for (size_t k = 0; k < g.size(); ++k) {
    Tensor grad = g[k].to(r.params[k].device()).clone();
    if (int(k) == bad_at) grad.narrow(0, grad.numel() - 1, 1).fill_(bad);
    r.params[k].set_grad(grad);
  }
  const bool stepped = r.scaler.step(*r.opt);
  r.scaler.update();
  return stepped;
}

TEST(GradScalerGpu, MatchesCpuRunExactly) {
  SKIP_WITHOUT_GPU();
  const int count = 500;  // more gradients than one launch holds
  Tensors init = random_grads(count, 1);
  ScaledRun cpu, gpu;
  for (const Tensor& v : init) {
    Tensor small = mul(v, 1.0 / 1024);  // parameters of magnitude ~1
    cpu.params.push_back(small.clone().set_requires_grad());
    gpu.params.push_back(small.cuda().detach().set_requires_grad());
  }
  cpu.opt = std::make_unique<optim::SGD>(cpu.params, 1e-3);
  gpu.opt = std::make_unique<optim::SGD>(gpu.params, 1e-3);
  struct Bad {
    int at;
    double value;
  };
  const Bad script[] = {{-1, 0}, {-1, 0}, {count - 1, INFINITY}, {-1, 0}, {250, NAN},
                        {-1, 0}, {-1, 0}, {7, -INFINITY},        {-1, 0}, {-1, 0}};
  int s = 0;
  for (const Bad& b : script) {
    Tensors g = random_grads(count, 100 + s++);
    const bool on_cpu = step(cpu, g, b.at, b.value);
    const bool on_gpu = step(gpu, g, b.at, b.value);
    EXPECT_EQ(on_gpu, on_cpu) << "step " << s;
    EXPECT_EQ(on_cpu, b.at < 0) << "step " << s;
    EXPECT_EQ(gpu.scaler.get_scale(), cpu.scaler.get_scale()) << "step " << s;
    for (int k = 0; k < count; k += 31) {
      EXPECT_EQ(max_abs_error(gpu.params[k].grad().cpu(), cpu.params[k].grad()), 0.0)
          << "gradient " << k << ", step " << s;
      // The SGD update itself may round differently on the GPU (a fused
      // multiply-add): an ulp of f32, or a flipped rounding of bf16.
      const double tol = cpu.params[k].dtype() == DType::bf16 ? 1e-2 : 1e-6;
      EXPECT_LE(scaled_error(gpu.params[k], cpu.params[k]), tol) << "parameter " << k;
    }
  }
  // 1024 -> 2048 (two good) -> 1024 (inf) -> 512 (NaN, after one good)
  // -> 1024 (two good) -> 512 (-inf) -> 1024 (two good).
  EXPECT_EQ(cpu.scaler.get_scale(), 1024.0);
}

}  // namespace
}  // namespace ddp::test
