// Models on the GPU in f32, bf16 and f16 against the same model on the CPU in
// f32 (same weights); skipped without a GPU. The output and every
// parameter's gradient are compared, each against its own scale:
// max |gpu − cpu| ≤ bound · max |cpu| (compare_scaled,
// tests/tensor/op_consistency_util.h).
//
// What is compared is the GPU's arithmetic, nothing else: the weights and the
// input are first rounded to the GPU run's dtype and the CPU reference runs
// on those same values in f32, so only the rounding of activations and
// gradients (and the kernels' own) differs. The loss is Σ w·y with fixed
// weights w = k/16, exact in every dtype, rather than Σ y: with Σ y every
// position of the GPT gets the same output gradient, and what LayerNorm's
// backward passes down is then a difference of nearly equal terms, whose
// error no bound relative to its own scale can be honest about. f32 runs
// with cuDNN's TF32 off (Note [cuDNN TF32]), so it is held to f32 rounding.
//
// Bounds, in u, the dtype's unit roundoff (2^-8 bf16, 2^-11 f16). Each op
// rounds its result to the dtype once, a relative error within ±u, about
// uniform (rms u/√3). Along a chain of m such ops the errors add like a random
// walk, and layers with random weights keep a relative error about as large
// as it is: rms ≈ u·√(m/3). The longest path of ResNet-20 has m ≈ 50 (19
// convolutions, their BatchNorms, 9 residual adds, the pooling, the
// classifier), the small GPT's m ≈ 30 (per block two LayerNorms, four
// matmuls, QKᵀ, softmax, P·V, GELU, two residual adds; then LayerNorm and
// the head): rms ≈ 4u, and the largest error over the largest reference value
// is about 1.5× the rms ratio, ~6u.
//  - outputs: 16u (bf16 6.3e-2, f16 7.8e-3), ~2.5× the estimate;
//  - gradients: backward rounds as often again, on activations that carry
//    the forward's errors, so m doubles: ~9u; 32u (bf16 0.125, f16 1.6e-2).
//    Weight gradients sum over batch and positions, which averages
//    independent errors rather than growing them.
//  - f32 (no TF32): only summation order and intrinsics differ, a few 2^-24
//    per op and ~2^-24·√n per sum of n terms: 1e-4 on both, with room.
// These are estimates, not measurements: each run prints its largest errors
// in u ("[models_gpu]" lines), so that a GPU run can tighten them.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/cudnn.h"
#include "ddp/nn/models/gpt.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "tensor/op_consistency_util.h"

using namespace ddp;
using namespace ddp::nn::models;
using op_consistency::compare_scaled;
using op_consistency::ScaledComparison;
using op_consistency::unit_roundoff;

namespace {

struct Bounds {
  double output, gradient;  // rtol of the reference's own scale
};

Bounds bounds(DType d) {
  if (d == DType::f32) return {1e-4, 1e-4};
  const double u = unit_roundoff(d);
  return {16 * u, 32 * u};
}

// Loss weights k/16 with k in [-16, 16] from a fixed sequence: exact in f16,
// bf16 and f32, the same on both devices.
Tensor loss_weights(const Shape& shape) {
  const int64_t n = shape_numel(shape);
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t h = 12345;
  for (float& x : v) {
    h = h * 1664525u + 1013904223u;
    x = float(int((h >> 16) % 33) - 16) / 16.0f;
  }
  return Tensor::from_vector(v, shape);
}

struct Run {
  Device device;
  DType dtype = DType::f32;
  Tensor y;                                           // on the host
  std::vector<std::pair<std::string, Tensor>> grads;  // by parameter name, on the host
};

template <class Model>
Run forward_backward(Model& model, const Tensor& input) {
  Run r;
  Tensor y = model.forward(input);
  r.device = y.device();
  r.dtype = y.dtype();
  sum(mul(y, loss_weights(y.shape()).to(y.device(), y.dtype()))).backward();
  r.y = y.detach().cpu();
  for (const auto& [name, p] : model.named_parameters())
    r.grads.emplace_back(name, p.grad().defined() ? p.grad().cpu() : Tensor());
  return r;
}

template <class MakeModel>
void compare(const char* what, MakeModel make, const Tensor& input) {
  nn::cudnn::AllowTf32Guard no_tf32(false);
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(what) + " " + dtype_name(d));
    auto cpu = make();
    {
      autograd::NoGradGuard no_grad;  // weights the GPU's dtype holds exactly
      for (const auto& [name, p] : cpu->named_parameters()) Tensor(p).copy_(p.to(d).to(DType::f32));
    }
    auto gpu = make();
    gpu->load_state_dict(cpu->state_dict());
    cpu->eval();
    gpu->eval();
    gpu->to(Device::cuda(0), d);
    const bool floating = is_floating(input.dtype());
    const Tensor cpu_input = floating ? input.to(d).to(DType::f32) : input;
    const Tensor gpu_input = floating ? cpu_input.to(Device::cuda(0), d) : input.cuda();

    const Run ref = forward_backward(*cpu, cpu_input);
    const Run got = forward_backward(*gpu, gpu_input);
    EXPECT_TRUE(got.device.is_cuda());
    EXPECT_EQ(got.dtype, d);
    const Bounds b = bounds(d);
    const double floor = op_consistency::resolution_floor(d);
    const double u = unit_roundoff(d);

    const ScaledComparison out = compare_scaled(got.y, ref.y, {b.output, floor});
    EXPECT_TRUE(out.ok()) << "output: " << out.describe();
    ASSERT_EQ(got.grads.size(), ref.grads.size());
    double worst = 0;
    std::string worst_name = "-";
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      const auto& [name, want] = ref.grads[i];
      const Tensor& g = got.grads[i].second;
      ASSERT_EQ(got.grads[i].first, name);
      ASSERT_TRUE(g.defined()) << name << ": no gradient on the GPU";
      ASSERT_TRUE(want.defined()) << name << ": no gradient on the CPU";
      const ScaledComparison c = compare_scaled(g, want, {b.gradient, floor});
      EXPECT_TRUE(c.ok()) << "gradient of " << name << ": " << c.describe();
      if (c.relative() >= worst) worst = c.relative(), worst_name = name;
    }
    std::printf(
        "[models_gpu] %s %s: output %.3g of its scale (%.2f u), worst gradient %.3g "
        "(%.2f u, %s); bounds %.2f u / %.2f u\n",
        what, dtype_name(d), out.relative(), out.relative() / u, worst, worst / u,
        worst_name.c_str(), b.output / u, b.gradient / u);
  }
}

TEST(ModelsGpu, ResNet20MatchesCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  manual_seed(20);  // the same weights and input on every run
  compare("resnet20", [] { return resnet20({1, 10}); }, randn({4, 1, 32, 32}));
}

TEST(ModelsGpu, SmallGptMatchesCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  manual_seed(2);
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
