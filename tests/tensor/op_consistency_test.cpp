// The op-consistency test, CPU half: for every entry of op_registry() (the
// tensor ops and those the higher layers register; Note [Registering ops
// from higher layers]) it runs the op on the CPU for every dtype it
// supports and backpropagates through it, and gradchecks differentiable ops
// in f64. The CUDA comparison is op_consistency_gpu_test.cpp, the bad
// inputs op_consistency_bad_inputs_test.cpp, the registry's own contents
// op_consistency_registry_test.cpp; every suite is instantiated as
// "op_consistency", so `ctest -R op_consistency` runs them all.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "ddp/autograd/gradcheck.h"
#include "ddp/tensor/memory_format.h"
#include "op_consistency_util.h"

namespace ddp::op_consistency {
namespace {

// Outputs are sane: on the CPU, at most kMaxDims dims, dense, and
// finite (samples keep every op in its domain: a NaN or inf is a bug).
void expect_sane(const Tensors& ts, const char* what) {
  for (size_t k = 0; k < ts.size(); ++k) {
    const Tensor& o = ts[k];
    SCOPED_TRACE(std::string(what) + " " + std::to_string(k));
    if (!o.defined()) continue;
    EXPECT_TRUE(o.device().is_cpu()) << o.describe();
    EXPECT_LE(o.dim(), kMaxDims) << o.describe();
    // Dense: contiguous, or a permutation of contiguous that keeps a dense
    // input's memory order (Note [Memory-format propagation]).
    Shape dense;
    EXPECT_TRUE(o.is_contiguous() || dense_layout_strides(o, &dense))
        << o.describe() << " strides " << shape_str(o.strides());
    for (int64_t s : o.shape()) EXPECT_GE(s, 0) << o.describe();
    if (is_floating(o.dtype()))
      for (double v : o.to_vector<double>()) ASSERT_TRUE(std::isfinite(v)) << o.to_string();
  }
}

// (1) CPU: runs for every dtype, outputs are sane; differentiable ops also
// backpropagate for every floating dtype, giving each differentiated input
// a finite gradient of its shape (at least one must be reached).
class OpCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(OpCpu, RunsAndBackpropagates) {
  const OpInfo& op = find_op(GetParam());
  ASSERT_FALSE(op.dtypes.empty());
  for (DType dt : op.dtypes) {
    SCOPED_TRACE(std::string("dtype ") + dtype_name(dt) + " on cpu");
    const bool with_grads = op.differentiable && is_floating(dt);
    Tensors inputs = sample_on(op.sample, dt, Device::cpu());
    RunResult r;
    try {
      r = run_op(op, inputs, with_grads);
    } catch (const std::exception& e) {
      FAIL() << op.name << " threw on " << dtype_name(dt) << ": " << e.what();
    }
    ASSERT_FALSE(r.outputs.empty());
    for (const Tensor& o : r.outputs) ASSERT_TRUE(o.defined());
    expect_sane(r.outputs, "output");
    if (!with_grads) continue;
    ASSERT_EQ(r.grads.size(), op.grad_inputs.size()) << describe_all(r.grads);
    bool reached = false;
    for (size_t i = 0; i < r.grads.size(); ++i) {
      if (!r.grads[i].defined()) continue;
      reached = true;
      const Tensor& in = inputs[size_t(op.grad_inputs[i])];
      EXPECT_EQ(r.grads[i].shape(), in.shape()) << "gradient of input " << op.grad_inputs[i];
    }
    EXPECT_TRUE(reached) << "no differentiated input got a gradient";
    Tensors grads;
    for (const Tensor& g : r.grads) grads.push_back(g.defined() ? g.contiguous() : g);
    expect_sane(grads, "gradient");
  }
}

INSTANTIATE_TEST_SUITE_P(op_consistency, OpCpu, ::testing::ValuesIn(op_names()), param_name);

// (2) Gradients in f64 on the CPU against finite differences.
class OpGradcheck : public ::testing::TestWithParam<std::string> {};

TEST_P(OpGradcheck, MatchesFiniteDifferences) {
  const OpInfo& op = find_op(GetParam());
  ASSERT_TRUE(op.differentiable);
  Tensors inputs = sample_on(op.sample, DType::f64, Device::cpu());
  Tensors diff;
  for (int k : op.grad_inputs) {
    inputs[size_t(k)] = inputs[size_t(k)].detach().set_requires_grad(true);
    diff.push_back(inputs[size_t(k)]);
  }
  // gradcheck sees only the differentiated inputs; indices and masks stay fixed.
  auto fn = [&](const Tensors& xs) {
    Tensors all = inputs;
    for (size_t i = 0; i < op.grad_inputs.size(); ++i) all[size_t(op.grad_inputs[i])] = xs[i];
    return op.run(all);
  };
  autograd::GradcheckResult r = autograd::gradcheck(fn, diff);
  EXPECT_TRUE(r.ok) << op.name << " inputs " << describe_all(diff) << ": " << r.message;
}

INSTANTIATE_TEST_SUITE_P(op_consistency, OpGradcheck,
                         ::testing::ValuesIn(op_names([](const OpInfo& op) {
                           return op.differentiable;
                         })),
                         param_name);

}  // namespace
}  // namespace ddp::op_consistency
