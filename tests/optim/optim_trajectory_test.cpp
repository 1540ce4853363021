// 20 training steps of a small model (tanh MLP, MSE loss) under SGD with
// Nesterov momentum and AdamW with weight decay against torch; the
// reference comes from tests/golden/make_optim_trajectory_golden.py. Unlike
// optim_golden_test.cpp the gradients come from libddp's own backward.
#include <gtest/gtest.h>

#include "ddp/io/safetensors.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/optim/adamw.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"
#include "golden_file.h"

namespace ddp::test {
namespace {

constexpr int kSteps = 20;
const char* const kNames[] = {"w1", "b1", "w2", "b2"};

const nn::TensorDict& trajectory_golden() {
  return golden_file("optim_trajectory");
}

// The options make_optim_trajectory_golden.py passes to torch.
std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& c, const Tensors& params) {
  if (c == "sgd_nesterov")
    return std::make_unique<optim::SGD>(
        params, 0.05, optim::SGDOptions{.momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
  return std::make_unique<optim::AdamW>(
      params, 0.01, optim::AdamWOptions{.betas = {0.9, 0.99}, .eps = 1e-8, .weight_decay = 0.05});
}

struct Case {
  const char* name;
  DType dtype;
  friend void PrintTo(const Case& c, std::ostream* os) {
    *os << c.name << " " << dtype_name(c.dtype);
  }
};

class OptimTrajectory : public ::testing::TestWithParam<Case> {};

// "Relative" is scaled_error's: the largest deviation over the largest
// reference magnitude (floor 1e-3, so a tiny bias still counts).
TEST_P(OptimTrajectory, TwentyStepsMatchTorch) {
  const auto [name, dtype] = GetParam();
  const std::string d = dtype == DType::f32 ? "f32" : "f64";
  const double tol = dtype == DType::f32 ? 1e-6 : 1e-12;
  const nn::TensorDict& g = trajectory_golden();
  Tensors params;
  for (const char* n : kNames)
    params.push_back(g.at(std::string("init.") + n).to(dtype).clone().set_requires_grad());
  Tensor x = g.at("x").to(dtype), y = g.at("y").to(dtype);
  auto opt = make_optimizer(name, params);
  const std::vector<double> losses =
      g.at(std::string(name) + "." + d + ".loss").to_vector<double>();
  for (int s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    Tensor h = tanh(add(matmul(x, params[0].t()), params[1]));
    Tensor loss = nn::functional::mse_loss(add(matmul(h, params[2].t()), params[3]), y);
    loss.backward();
    opt->step();
    EXPECT_NEAR(loss.item<double>(), losses[s], tol * std::abs(losses[s])) << "step " << s + 1;
    for (size_t k = 0; k < params.size(); ++k) {
      const Tensor want = g.at(std::string(name) + "." + d + "." + kNames[k]).select(0, s + 1);
      EXPECT_LE(scaled_error(params[k], want, 1e-3), tol) << kNames[k] << " after step " << s + 1;
    }
  }
  // The run really trains: the loss falls by a clear margin.
  EXPECT_LT(losses[kSteps - 1], 0.9 * losses[0]);
}

INSTANTIATE_TEST_SUITE_P(Torch, OptimTrajectory,
                         ::testing::Values(Case{"sgd_nesterov", DType::f32},
                                           Case{"sgd_nesterov", DType::f64},
                                           Case{"adamw", DType::f32}, Case{"adamw", DType::f64}),
                         [](const auto& info) {
                           return std::string(info.param.name) +
                                  (info.param.dtype == DType::f32 ? "_f32" : "_f64");
                         });

}  // namespace
}  // namespace ddp::test
