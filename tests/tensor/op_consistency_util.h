#pragma once
// Shared by the op-consistency tests (op_consistency*_test.cpp), which walk
// op_registry(): running an entry on a device, its gradients, and comparing
// two runs. See Note [Registering ops from higher layers] in op_registry.h.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ddp/autograd/engine.h"
#include "ddp/ddp.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/op_registry.h"
#include "ddp/tensor/ops.h"

namespace ddp::op_consistency {

constexpr uint64_t kSampleSeed = 42;
constexpr uint64_t kGradWeightSeed = 7;

inline std::string describe_all(const Tensors& ts) {
  std::string s;
  for (const Tensor& t : ts) s += (s.empty() ? "" : ", ") + (t.defined() ? t.describe() : "undefined");
  return s;
}

// Registry names, for INSTANTIATE_TEST_SUITE_P, of the entries that pass.
inline std::vector<std::string> op_names(std::function<bool(const OpInfo&)> keep = {}) {
  std::vector<std::string> names;
  for (const OpInfo& op : op_registry())
    if (!keep || keep(op)) names.push_back(op.name);
  return names;
}

inline std::string param_name(const ::testing::TestParamInfo<std::string>& p) { return p.param; }

inline Tensors sample_on(const op_samples::SampleFn& sample, DType dt, Device dev) {
  Generator gen(kSampleSeed);
  return sample(dt, dev, gen);
}

struct RunResult {
  Tensors outputs;
  Tensors grads;  // one per op.grad_inputs entry; undefined where unreachable
};

// Runs op on inputs. With_grads (floating dtypes of differentiable ops), its
// grad_inputs become leaves and the gradients of Σ_k sum(w_k · out_k) are
// taken, the weights w_k drawn in f32 on the CPU from a fixed generator and
// then converted and moved (Note [Sample inputs]), so both devices
// backpropagate the same values. Outputs come back detached.
inline RunResult run_op(const OpInfo& op, Tensors inputs, bool with_grads) {
  RunResult r;
  Tensors leaves;
  if (with_grads) {
    for (int k : op.grad_inputs) {
      inputs[size_t(k)] = inputs[size_t(k)].detach().set_requires_grad(true);
      leaves.push_back(inputs[size_t(k)]);
    }
  }
  Tensors out = op.run(inputs);
  Tensor loss;
  Generator wgen(kGradWeightSeed);
  for (const Tensor& o : out) {
    if (!with_grads || !o.requires_grad()) continue;
    Tensor w = op_samples::uniform_values(o.shape(), -1, 1, o.dtype(), o.device(), wgen);
    Tensor term = sum(mul(o, w)).to(DType::f64);
    loss = loss.defined() ? add(loss, term) : term;
  }
  if (loss.defined()) r.grads = autograd::grad({loss}, leaves, {ones_like(loss)});
  for (const Tensor& o : out) r.outputs.push_back(o.detach());
  return r;
}

// max |got − want| / max(1, max |want|) in f64 (NaN counts as infinite).
inline double scaled_error(const Tensor& got, const Tensor& want) {
  auto g = got.cpu().to(DType::f64).to_vector<double>();
  auto w = want.cpu().to(DType::f64).to_vector<double>();
  double scale = 1.0, err = 0.0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < g.size() && i < w.size(); ++i) {
    const double d = std::abs(g[i] - w[i]);
    err = std::max(err, std::isnan(d) ? INFINITY : d);
  }
  return err / scale;
}

}  // namespace ddp::op_consistency
