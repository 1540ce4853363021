#pragma once
// Shared by the optim tests: the golden cases of make_optim_golden.py and a
// way to build and replay them.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "ddp/io/safetensors.h"
#include "ddp/optim/adamw.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"
#include "golden_file.h"

namespace ddp::test {

constexpr int kGoldenSteps = 5;
constexpr int kGoldenParams = 3;

inline const nn::TensorDict& optim_golden() {
  return golden_file("optim");
}

inline std::string golden_key(const std::string& c, DType d, int k, const char* what) {
  return c + "." + (d == DType::f32 ? "f32" : "f64") + ".p" + std::to_string(k) + "." + what;
}

// The initial parameters of a case, as fresh leaves that require grad.
inline Tensors golden_params(const std::string& c, DType d) {
  Tensors out;
  for (int k = 0; k < kGoldenParams; ++k) {
    Tensor p = optim_golden().at(golden_key(c, d, k, "params")).select(0, 0).clone();
    out.push_back(p.set_requires_grad());
  }
  return out;
}

// The optimizer of a case, built with the options make_optim_golden.py
// passes to torch.
inline std::unique_ptr<optim::Optimizer> golden_optimizer(const std::string& c, const Tensors& p) {
  using namespace optim;
  if (c == "sgd_plain") return std::make_unique<SGD>(p, 0.1);
  if (c == "sgd_momentum")
    return std::make_unique<SGD>(
        p, 0.05, SGDOptions{.momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
  if (c == "sgd_nesterov")
    return std::make_unique<SGD>(
        p, 0.05,
        SGDOptions{.momentum = 0.8, .weight_decay = 1e-3, .nesterov = true, .maximize = true});
  if (c == "adamw_default") return std::make_unique<AdamW>(p, 0.01);
  if (c == "adamw_amsgrad")
    return std::make_unique<AdamW>(
        p, 0.02,
        AdamWOptions{.betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.05, .amsgrad = true});
  if (c == "adamw_groups")
    return std::make_unique<AdamW>(
        std::vector<ParamGroup>{{{p[0], p[2]}, 0.03, 0.1}, {{p[1]}, std::nullopt, 0.0}}, 0.005);
  ADD_FAILURE() << "unknown case " << c;
  return nullptr;
}

// Sets the gradients of step s (0-based), leaving .grad undefined where the
// case has none.
inline void set_golden_grads(const std::string& c, DType d, const Tensors& params, int s) {
  for (int k = 0; k < kGoldenParams; ++k) {
    auto mask = optim_golden().at(c + ".p" + std::to_string(k) + ".has_grad").to_vector<uint8_t>();
    Tensor g = optim_golden().at(golden_key(c, d, k, "grads")).select(0, s).clone();
    Tensor(params[k]).set_grad(mask[s] ? g : Tensor());
  }
}

// Largest scaled error of the parameters against torch's after step s + 1.
inline double golden_error(const std::string& c, DType d, const Tensors& params, int s) {
  double err = 0;
  for (int k = 0; k < kGoldenParams; ++k)
    err = std::max(
        err,
        scaled_error(params[k], optim_golden().at(golden_key(c, d, k, "params")).select(0, s + 1)));
  return err;
}

}  // namespace ddp::test
