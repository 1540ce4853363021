// The op-consistency test, CUDA half (skipped without a usable GPU): every
// registry entry runs on CUDA for every dtype it supports, on its small
// sample and on its realistic cuda_samples, and its outputs and the
// gradients of its differentiated inputs must match the CPU's; its bad
// inputs must be refused on CUDA as on the CPU.
//
// Tolerances: integer and bool results (and rand's f32 draws, Note
// [Counter-based RNG]) match exactly. Entries with cuda_scaled_tolerance are
// held to max |cuda − cpu| / max(1, max |cpu|) per dtype (long sums:
// convolutions, attention, norms, optimizer steps). Others elementwise:
// |cuda − cpu| ≤ atol + rtol·|cpu| with (rtol, atol) by dtype below, as
// reductions and matmuls sum in another order on the GPU and f16/bf16
// results may round differently by an ulp.

#include <gtest/gtest.h>

#include <string>

#include "ddp/tensor/cuda.h"
#include "op_consistency_bad_inputs.h"

namespace ddp::op_consistency {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

struct Tolerance {
  double rtol, atol;
};

Tolerance elementwise_tolerance(DType dt) {
  switch (dt) {
    case DType::f64: return {1e-10, 1e-12};
    case DType::f32: return {1e-4, 1e-5};
    case DType::f16: return {1e-2, 1e-2};
    case DType::bf16: return {2e-2, 2e-2};
    default: return {0, 0};
  }
}

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
  } else if (auto it = op.cuda_scaled_tolerance.find(dt); it != op.cuda_scaled_tolerance.end()) {
    EXPECT_LE(scaled_error(host, cpu), it->second) << "max abs error " << max_abs_error(host, cpu);
  } else {
    Tolerance tol = elementwise_tolerance(dt);
    EXPECT_TRUE(allclose(host, cpu, tol.rtol, tol.atol))
        << "max abs error " << max_abs_error(host, cpu) << "\n"
        << host.to_string() << "\nvs\n"
        << cpu.to_string();
  }
}

void compare_sample(const OpInfo& op, const op_samples::SampleFn& sample, DType dt) {
  const bool with_grads = op.differentiable && is_floating(dt);
  RunResult cpu = run_op(op, sample_on(sample, dt, Device::cpu()), with_grads);
  RunResult gpu = run_op(op, sample_on(sample, dt, Device::cuda(0)), with_grads);
  ASSERT_EQ(gpu.outputs.size(), cpu.outputs.size());
  for (size_t k = 0; k < cpu.outputs.size(); ++k) {
    SCOPED_TRACE("output " + std::to_string(k));
    expect_match(op, gpu.outputs[k], cpu.outputs[k]);
  }
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (size_t k = 0; k < cpu.grads.size(); ++k) {
    SCOPED_TRACE("gradient of input " + std::to_string(op.grad_inputs[k]));
    expect_match(op, gpu.grads[k], cpu.grads[k]);
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
