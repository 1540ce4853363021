// The fused multi-tensor optimizer steps and clip_grad_norm_ on CUDA against
// the CPU path; skipped without a GPU.
//
// Error measure: scaled_error (max |gpu - cpu| over max |cpu|). Both run
// one formula (kernels/common/foreach_math.h), but the GPU may contract
// a*b+c into one rounding (Note [Foreach numerics]):
//   f32: 1e-5 after 5 steps (a few ulps per step, accumulated)
//   f64: 1e-12
//   f16: 2e-3, bf16: 1e-2 (the f32 result rounded once; an ulp of f32 can
//        flip that rounding by one f16/bf16 ulp)
#include <gtest/gtest.h>

#include <cmath>

#include "ddp/optim/adamw.h"
#include "ddp/optim/clip_grad.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"

namespace ddp::test {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

double tolerance(DType dt) {
  switch (dt) {
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1e-2;
    case DType::f64:
      return 1e-12;
    default:
      return 1e-5;
  }
}

// n parameters of varied sizes (some larger than one 16384-element chunk,
// one empty), random values, on the CPU.
Tensors random_params(int n, DType dt, uint64_t seed) {
  Generator gen(seed);
  Tensors out;
  for (int k = 0; k < n; ++k) {
    const int64_t rows = k % 7 == 3 ? 0 : 1 + (k * 37) % 11;
    const int64_t cols = k % 5 == 0 ? 3001 : 1 + (k * 13) % 17;
    out.push_back(randn({rows, cols}, DType::f32, &gen).to(dt));
  }
  return out;
}

Tensors leaves_on(const Tensors& values, Device d) {
  Tensors out;
  for (const Tensor& v : values) out.push_back(v.to(d).detach().set_requires_grad());
  return out;
}

std::unique_ptr<optim::Optimizer> make(bool adamw, const Tensors& p) {
  if (adamw)
    return std::make_unique<optim::AdamW>(
        std::vector<optim::ParamGroup>{{Tensors(p.begin(), p.begin() + p.size() / 2)},
                                       {Tensors(p.begin() + p.size() / 2, p.end()), 0.02, 0.0}},
        0.01, optim::AdamWOptions{.weight_decay = 0.1, .amsgrad = true});
  return std::make_unique<optim::SGD>(
      std::vector<optim::ParamGroup>{{Tensors(p.begin(), p.begin() + p.size() / 2)},
                                     {Tensors(p.begin() + p.size() / 2, p.end()), 0.05, 0.0}},
      0.1, optim::SGDOptions{.momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
}

struct StepCase {
  bool adamw;
  DType dtype;
  int count;  // parameters; 1500 (two groups of 750) needs several launches per group
  friend void PrintTo(const StepCase& c, std::ostream* os) {
    *os << (c.adamw ? "AdamW " : "SGD ") << dtype_name(c.dtype) << " x" << c.count;
  }
};

class FusedStepGpu : public ::testing::TestWithParam<StepCase> {};

TEST_P(FusedStepGpu, MatchesCpu) {
  SKIP_WITHOUT_GPU();
  const auto [adamw, dt, count] = GetParam();
  Tensors init = random_params(count, dt, 7);
  Tensors cpu = leaves_on(init, Device::cpu()), gpu = leaves_on(init, Device::cuda(0));
  auto opt_cpu = make(adamw, cpu), opt_gpu = make(adamw, gpu);
  for (int s = 0; s < 5; ++s) {
    Tensors grads = random_params(count, dt, 100 + s);
    for (int k = 0; k < count; ++k) {
      if ((k + s) % 9 == 0) {  // some parameters skip some steps
        cpu[k].set_grad(Tensor());
        gpu[k].set_grad(Tensor());
        continue;
      }
      cpu[k].set_grad(grads[k]);
      gpu[k].set_grad(grads[k].to(Device::cuda(0)));
    }
    opt_cpu->step();
    opt_gpu->step();
  }
  for (int k = 0; k < count; ++k) {
    ASSERT_TRUE(gpu[k].is_cuda());
    EXPECT_LE(scaled_error(gpu[k], cpu[k], 1e-3), tolerance(dt)) << "parameter " << k;
  }
  // The state matches too (and stays on the GPU).
  const char* key = adamw ? "exp_avg" : "momentum_buffer";
  for (int k = 0; k < count; k += 17) {
    if (opt_cpu->state(k).empty()) continue;
    EXPECT_TRUE(opt_gpu->state(k).at(key).is_cuda());
    EXPECT_LE(scaled_error(opt_gpu->state(k).at(key), opt_cpu->state(k).at(key), 1e-3),
              tolerance(dt));
  }
}

std::vector<StepCase> step_cases() {
  std::vector<StepCase> out;
  for (bool adamw : {false, true}) {
    for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) out.push_back({adamw, d, 40});
    out.push_back({adamw, DType::f32, 1500});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, FusedStepGpu, ::testing::ValuesIn(step_cases()),
                         [](const auto& info) {
                           return std::string(info.param.adamw ? "AdamW_" : "SGD_") +
                                  dtype_name(info.param.dtype) + "_" +
                                  std::to_string(info.param.count);
                         });

TEST(ClipGradNormGpu, MatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (double norm_type : {2.0, 1.0, 3.0, double(INFINITY)}) {
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      Tensors values = random_params(600, dt, 11);
      Tensors cpu = leaves_on(values, Device::cpu()), gpu = leaves_on(values, Device::cuda(0));
      for (size_t k = 0; k < values.size(); ++k) {
        cpu[k].set_grad(values[k].clone());
        gpu[k].set_grad(values[k].to(Device::cuda(0)));
      }
      const double want = optim::clip_grad_norm_(cpu, 0.5, norm_type);
      const double got = optim::clip_grad_norm_(gpu, 0.5, norm_type);
      EXPECT_NEAR(got, want, 1e-12 * want) << "norm " << norm_type << " " << dtype_name(dt);
      for (size_t k = 0; k < values.size(); k += 23)
        EXPECT_LE(scaled_error(gpu[k].grad(), cpu[k].grad(), 1e-6), tolerance(dt));
    }
  }
}

TEST(ClipGradNormGpu, NonFiniteAndMixedDevices) {
  SKIP_WITHOUT_GPU();
  Tensor a = Tensor::zeros({3}, Device::cuda(0)).set_requires_grad();
  a.set_grad(Tensor::from_vector(std::vector<float>{1, NAN, 2}, {3}).cuda());
  EXPECT_TRUE(std::isnan(optim::clip_grad_norm_({a}, 1.0, INFINITY)));
  Tensor b = Tensor::zeros({3}).set_requires_grad();
  b.set_grad(Tensor::ones({3}));
  Tensor c = Tensor::zeros({3}, Device::cuda(0)).set_requires_grad();
  c.set_grad(Tensor::ones({3}, Device::cuda(0)));
  EXPECT_THROW(optim::clip_grad_norm_({b, c}, 1.0), DeviceError);
}

}  // namespace
}  // namespace ddp::test
