// The op-consistency test, CUDA half (skipped without a usable GPU): every
// registry entry runs on CUDA for every dtype it supports, on its small
// sample and on its realistic cuda_samples, and its outputs and the
// gradients of its differentiated inputs must match the CPU's; its bad
// inputs must be refused on CUDA as on the CPU.
//
// Tolerances: integer and bool results (and rand's f32 draws, Note
// [Counter-based RNG]) match exactly. Floating outputs and gradients are
// each held to max |cuda − cpu| ≤ rtol · max |cpu| + atol against their own
// scale, with the entry's cuda_scaled_tolerance as rtol where it states one
// and a default by dtype otherwise; the bounds and why they are honest are
// in op_consistency_util.h (compare_scaled). Gradients are compared per
// output (the gradients of each output's own weighted sum), so a small
// output's gradient is not measured against a large one's scale.

#include <gtest/gtest.h>

#include <string>

#include "ddp/tensor/cuda.h"
#include "op_consistency_bad_inputs.h"

namespace ddp::op_consistency {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

void expect_match(const OpInfo& op, const Tensor& gpu, const Tensor& cpu) {
  if (!gpu.defined() || !cpu.defined()) {
    EXPECT_EQ(gpu.defined(), cpu.defined()) << "defined on one device only";
    return;
  }
  EXPECT_TRUE(gpu.device().is_cuda()) << gpu.describe();
  ASSERT_EQ(gpu.shape(), cpu.shape()) << gpu.describe() << " vs " << cpu.describe();
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << gpu.describe() << " vs " << cpu.describe();
  Tensor host = gpu.cpu();
  const DType dt = cpu.dtype();
  const bool exact = !is_floating(dt) || (op.name == "rand" && dt == DType::f32);
  if (exact) {
    EXPECT_EQ(max_abs_error(host, cpu), 0.0) << host.to_string() << "\nvs\n" << cpu.to_string();
    return;
  }
  const ScaledComparison c = compare_scaled(host, cpu, scaled_tolerance_for(op, dt));
  EXPECT_TRUE(c.ok()) << c.describe() << "\n"
                      << (cpu.numel() <= 64 ? host.to_string() + "\nvs\n" + cpu.to_string()
                                            : cpu.describe());
}

// Inputs above this many elements in all take one backward for all outputs
// together instead of one per output: the CPU reference of GPT-2's
// cross-entropy ([4096, 50257], three outputs) took 154 s per-output on the
// first GPU run, more than a GPU window can give one test.
constexpr int64_t kPerOutputLimit = int64_t(1) << 22;

void compare_sample(const OpInfo& op, const op_samples::SampleFn& sample, DType dt) {
  const bool with_grads = op.differentiable && is_floating(dt);
  Tensors cpu_in = sample_on(sample, dt, Device::cpu());
  int64_t numel = 0;
  for (const Tensor& t : cpu_in) numel += t.defined() ? t.numel() : 0;
  const bool per_output = numel <= kPerOutputLimit;
  RunResult cpu = run_op(op, std::move(cpu_in), with_grads, per_output);
  RunResult gpu = run_op(op, sample_on(sample, dt, Device::cuda(0)), with_grads, per_output);
  ASSERT_EQ(gpu.outputs.size(), cpu.outputs.size());
  for (size_t k = 0; k < cpu.outputs.size(); ++k) {
    SCOPED_TRACE("output " + std::to_string(k));
    expect_match(op, gpu.outputs[k], cpu.outputs[k]);
  }
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (size_t k = 0; k < cpu.grads.size(); ++k) {
    SCOPED_TRACE("gradient of every output with respect to input " +
                 std::to_string(op.grad_inputs[k]));
    expect_match(op, gpu.grads[k], cpu.grads[k]);
  }
  ASSERT_EQ(gpu.output_grads.size(), cpu.output_grads.size());
  for (size_t k = 0; k < cpu.output_grads.size(); ++k) {
    ASSERT_EQ(gpu.output_grads[k].size(), cpu.output_grads[k].size()) << "output " << k;
    for (size_t j = 0; j < cpu.output_grads[k].size(); ++j) {
      SCOPED_TRACE("gradient of output " + std::to_string(k) + " with respect to input " +
                   std::to_string(op.grad_inputs[j]));
      expect_match(op, gpu.output_grads[k][j], cpu.output_grads[k][j]);
    }
  }
}

class OpCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(OpCuda, MatchesCpu) {
  SKIP_WITHOUT_GPU();
  const OpInfo& op = find_op(GetParam());
  for (DType dt : op.dtypes) {
    SCOPED_TRACE(std::string("dtype ") + dtype_name(dt) + ", small sample");
    compare_sample(op, op.sample, dt);
  }
  for (size_t s = 0; s < op.cuda_samples.size(); ++s) {
    for (DType dt : op.dtypes) {
      if (dt == DType::f64) continue;  // realistic shapes: the training dtypes
      SCOPED_TRACE(std::string("dtype ") + dtype_name(dt) + ", cuda sample " + std::to_string(s));
      compare_sample(op, op.cuda_samples[s], dt);
    }
  }
}

TEST_P(OpCuda, RefusesBadInputs) {
  SKIP_WITHOUT_GPU();
  const OpInfo& op = find_op(GetParam());
  for (const BadInputCase& c : op.bad_inputs) expect_refused(op, c, Device::cuda(0));
}

INSTANTIATE_TEST_SUITE_P(op_consistency, OpCuda, ::testing::ValuesIn(op_names()), param_name);

}  // namespace
}  // namespace ddp::op_consistency
