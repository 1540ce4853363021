// The op registry itself: every op the library exposes is registered (a list
// kept here, so dropping an entry fails), names are unique identifiers,
// entries are complete, find_op refuses unknown names and registration is
// closed once the registry was read (Note [Registering ops from higher
// layers]).

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "ddp/tensor/op_list.h"
#include "op_consistency_util.h"

namespace ddp::op_consistency {
namespace {

// Every op of the public headers, by registry name. ddp/tensor/ops.h and
// op_list.h; nn/functional/*.h; optim/*.h; amp/grad_scaler.h.
std::vector<std::string> exposed_ops() {
  std::vector<std::string> names;
#define DDP_LISTED(name, ...) names.push_back(#name);
  DDP_FOR_EACH_UNARY_OP(DDP_LISTED)
  DDP_FOR_EACH_BINARY_OP(DDP_LISTED)
  DDP_FOR_EACH_COMPARE_OP(DDP_LISTED)
#undef DDP_LISTED
  for (const char* name : {
           // tensor layer (ddp/tensor/ops.h)
           "where", "masked_fill", "pow", "sum", "mean", "var", "sum_to", "max_all", "min_all",
           "max_dim", "min_dim", "argmax", "argmin", "matmul", "bmm", "softmax", "log_softmax",
           "full", "arange", "rand", "randn", "cat", "stack", "index_select", "gather",
           "scatter_add", "one_hot", "transpose_copy", "cast", "inplace_arithmetic",
           // nn (ddp/nn/functional/*.h)
           "conv2d", "to_channels_last", "batch_norm_train", "batch_norm_running_stats", "batch_norm_eval", "max_pool2d",
           "adaptive_avg_pool2d", "layer_norm", "linear", "linear_gelu", "linear_gelu_linear", "functional_gelu", "dropout",
           "embedding", "cross_entropy", "mse_loss", "scaled_dot_product_attention",
           "scaled_dot_product_attention_causal", "scaled_dot_product_attention_half",
           "conv2d_bias_relu",
           "batch_norm_add_relu_train", "batch_norm_add_relu_eval",
           "batch_norm_add_relu_running_stats",
           // optim (ddp/optim/*.h) and amp (ddp/amp/grad_scaler.h)
           "sgd_step", "adamw_step", "clip_grad_norm", "clip_grad_value", "grad_scaler_unscale"})
    names.push_back(name);
  return names;
}

class OpIsRegistered : public ::testing::TestWithParam<std::string> {};

TEST_P(OpIsRegistered, FindOpFindsIt) {
  EXPECT_NO_THROW(find_op(GetParam()));
  EXPECT_EQ(find_op(GetParam()).name, GetParam());
}

INSTANTIATE_TEST_SUITE_P(op_consistency, OpIsRegistered, ::testing::ValuesIn(exposed_ops()),
                         param_name);

class OpEntry : public ::testing::TestWithParam<std::string> {};

TEST_P(OpEntry, IsCompleteAndUniquelyNamed) {
  const OpInfo& op = find_op(GetParam());
  int count = 0;
  for (const OpInfo& other : op_registry()) count += other.name == op.name;
  EXPECT_EQ(count, 1) << "duplicate " << op.name;
  for (char c : op.name)
    EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_') << op.name;
  EXPECT_TRUE(op.sample && op.run) << op.name;
  EXPECT_FALSE(op.dtypes.empty()) << op.name;
  EXPECT_EQ(op.differentiable, !op.grad_inputs.empty()) << op.name;
  for (const auto& s : op.cuda_samples) EXPECT_TRUE(bool(s)) << op.name;
  for (const auto& [dt, tol] : op.cuda_scaled_tolerance) EXPECT_GT(tol, 0.0) << op.name;
}

INSTANTIATE_TEST_SUITE_P(op_consistency, OpEntry, ::testing::ValuesIn(op_names()), param_name);

// Also catches an entry registered without being added to exposed_ops().
class OpRegistryLookups : public ::testing::TestWithParam<std::string> {};

TEST_P(OpRegistryLookups, Behave) {
  const std::string what = GetParam();
  if (what == "every_entry_is_listed") {
    std::vector<std::string> listed = exposed_ops();
    std::set<std::string> known(listed.begin(), listed.end());
    for (const OpInfo& op : op_registry())
      EXPECT_TRUE(known.count(op.name)) << op.name << " is registered but not in exposed_ops()";
  } else if (what == "unknown_names_are_refused") {
    for (const char* name : {"no_such_op", "Conv2d", ""}) {
      try {
        find_op(name);
        ADD_FAILURE() << "find_op accepted '" << name << "'";
      } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("find_op: no op named '" + std::string(name) + "'"),
                  std::string::npos)
            << e.what();
      }
    }
  } else if (what == "late_registration_is_refused") {
    const size_t before = op_registry().size();
    auto add = [](std::vector<OpInfo>& ops) { ops.push_back(OpInfo{}); };
    try {
      register_op_infos("tests/late", add);
      ADD_FAILURE() << "register_op_infos after op_registry() was read did not raise";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("op_registry() was already read"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(op_registry().size(), before);
  } else {
    FAIL() << "unknown check " << what;
  }
}

INSTANTIATE_TEST_SUITE_P(op_consistency, OpRegistryLookups,
                         ::testing::Values("every_entry_is_listed", "unknown_names_are_refused",
                                           "late_registration_is_refused"),
                         param_name);

}  // namespace
}  // namespace ddp::op_consistency
