// The op-consistency test: one test per entry of op_registry(). Each runs the
// op on the CPU for every dtype it supports; on CUDA too (when a usable GPU
// is present) and compares with the CPU; and gradchecks differentiable ops in
// f64 on the CPU. See Note [One list per op family] in op_list.h.

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "ddp/ddp.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/op_registry.h"

namespace ddp {
namespace {

constexpr uint64_t kSampleSeed = 42;

struct Tolerance {
  double rtol, atol;
};

// CPU-vs-CUDA tolerance by output dtype: reductions and matmuls sum in
// another order on the GPU, and f16/bf16 results may round differently by an
// ulp. Integer and bool results must match exactly.
Tolerance tolerance(DType dt) {
  switch (dt) {
    case DType::f64: return {1e-10, 1e-12};
    case DType::f32: return {1e-4, 1e-5};
    case DType::f16: return {1e-2, 1e-2};
    case DType::bf16: return {2e-2, 2e-2};
    default: return {0, 0};
  }
}

std::string describe_all(const Tensors& ts) {
  std::string s;
  for (const Tensor& t : ts) s += (s.empty() ? "" : ", ") + t.describe();
  return s;
}

class OpConsistency : public ::testing::TestWithParam<std::string> {};

// (1) CPU: runs for every dtype, outputs are sane.
Tensors run_on(const OpInfo& op, DType dt, Device dev) {
  Generator gen(kSampleSeed);
  return op.run(op.sample(dt, dev, gen));
}

void check_cpu(const OpInfo& op, DType dt, Tensors* outputs) {
  SCOPED_TRACE(std::string("dtype ") + dtype_name(dt) + " on cpu");
  Tensors out;
  try {
    out = run_on(op, dt, Device::cpu());
  } catch (const std::exception& e) {
    FAIL() << op.name << " threw on " << dtype_name(dt) << ": " << e.what();
  }
  ASSERT_FALSE(out.empty());
  for (size_t k = 0; k < out.size(); ++k) {
    const Tensor& o = out[k];
    SCOPED_TRACE("output " + std::to_string(k));
    ASSERT_TRUE(o.defined());
    EXPECT_TRUE(o.device().is_cpu()) << o.describe();
    EXPECT_LE(o.dim(), kMaxDims) << o.describe();
    EXPECT_TRUE(o.is_contiguous()) << o.describe();
    for (int64_t s : o.shape()) EXPECT_GE(s, 0) << o.describe();
    // Samples keep every op in its domain: a NaN or inf is a bug.
    if (is_floating(o.dtype()))
      for (double v : o.to_vector<double>()) ASSERT_TRUE(std::isfinite(v)) << o.to_string();
  }
  *outputs = out;
}

// (2) CUDA: the same inputs give the same outputs as on the CPU.
void check_cuda_matches(const OpInfo& op, DType dt, const Tensors& cpu_out) {
  SCOPED_TRACE(std::string("dtype ") + dtype_name(dt) + " on cuda");
  Tensors out = run_on(op, dt, Device::cuda(0));
  ASSERT_EQ(out.size(), cpu_out.size());
  for (size_t k = 0; k < out.size(); ++k) {
    SCOPED_TRACE("output " + std::to_string(k));
    const Tensor &g = out[k], &c = cpu_out[k];
    EXPECT_TRUE(g.device().is_cuda()) << g.describe();
    ASSERT_EQ(g.shape(), c.shape()) << g.describe() << " vs " << c.describe();
    ASSERT_EQ(g.dtype(), c.dtype()) << g.describe() << " vs " << c.describe();
    Tensor host = g.cpu();
    // Counter-based RNG: uniform f32 is bit-identical on both devices.
    bool exact = !is_floating(c.dtype()) || (op.name == "rand" && c.dtype() == DType::f32);
    if (exact) {
      EXPECT_EQ(max_abs_error(host, c), 0.0) << host.to_string() << "\nvs\n" << c.to_string();
    } else {
      Tolerance tol = tolerance(c.dtype());
      EXPECT_TRUE(allclose(host, c, tol.rtol, tol.atol))
          << "max abs error " << max_abs_error(host, c) << "\n"
          << host.to_string() << "\nvs\n"
          << c.to_string();
    }
  }
}

// (3) Gradients in f64 on the CPU against finite differences.
void check_gradients(const OpInfo& op) {
  Generator gen(kSampleSeed);
  Tensors inputs = op.sample(DType::f64, Device::cpu(), gen);
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

TEST_P(OpConsistency, Op) {
  const OpInfo& op = find_op(GetParam());
  ASSERT_FALSE(op.dtypes.empty());
  bool cuda = cuda::is_available();
  for (DType dt : op.dtypes) {
    Tensors cpu_out;
    check_cpu(op, dt, &cpu_out);
    if (cpu_out.empty() || !cuda) continue;  // no GPU: the CPU part alone
    check_cuda_matches(op, dt, cpu_out);
  }
  if (op.differentiable) check_gradients(op);
}

std::vector<std::string> op_names() {
  std::vector<std::string> names;
  for (const OpInfo& op : op_registry()) names.push_back(op.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(, OpConsistency, ::testing::ValuesIn(op_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// ---- the registry itself ------------------------------------------------------

TEST(OpConsistencyRegistry, NamesAreUniqueIdentifiers) {
  std::set<std::string> seen;
  for (const OpInfo& op : op_registry()) {
    EXPECT_TRUE(seen.insert(op.name).second) << "duplicate " << op.name;
    ASSERT_FALSE(op.name.empty());
    for (char c : op.name) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_') << op.name;
    EXPECT_TRUE(op.sample && op.run) << op.name;
    EXPECT_EQ(op.differentiable, !op.grad_inputs.empty()) << op.name;
  }
}

TEST(OpConsistencyRegistry, EveryListedOpIsRegistered) {
  std::vector<std::string> listed;
#define DDP_LISTED(name, ...) listed.push_back(#name);
  DDP_FOR_EACH_UNARY_OP(DDP_LISTED)
  DDP_FOR_EACH_BINARY_OP(DDP_LISTED)
  DDP_FOR_EACH_COMPARE_OP(DDP_LISTED)
#undef DDP_LISTED
  for (const char* name :
       {"where", "masked_fill", "pow", "sum", "mean", "var", "max_dim", "min_dim", "argmax",
        "argmin", "matmul", "bmm", "softmax", "log_softmax", "full", "arange", "rand", "randn",
        "cat", "stack", "index_select", "gather", "scatter_add", "one_hot", "transpose_copy",
        "cast"})
    listed.push_back(name);
  for (const std::string& name : listed) EXPECT_NO_THROW(find_op(name)) << name;
}

TEST(OpConsistencyRegistry, FindOpRejectsUnknownNames) {
  EXPECT_THROW(find_op("no_such_op"), ValueError);
  try {
    find_op("no_such_op");
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_op"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddp
