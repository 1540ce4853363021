// The op-consistency test, bad inputs on the CPU: every registry entry lists
// inputs the op must refuse (OpInfo::bad_inputs), and each must raise the
// named ddp::Error subclass with a message containing the given text. The
// same cases run on CUDA in op_consistency_gpu_test.cpp.

#include <gtest/gtest.h>

#include "op_consistency_bad_inputs.h"

namespace ddp::op_consistency {
namespace {

class OpBadInputs : public ::testing::TestWithParam<std::string> {};

TEST_P(OpBadInputs, RaiseTheirErrorOnCpu) {
  const OpInfo& op = find_op(GetParam());
  ASSERT_FALSE(op.bad_inputs.empty()) << op.name << " lists no bad inputs";
  for (const BadInputCase& c : op.bad_inputs) expect_refused(op, c, Device::cpu());
}

INSTANTIATE_TEST_SUITE_P(op_consistency, OpBadInputs, ::testing::ValuesIn(op_names()), param_name);

}  // namespace
}  // namespace ddp::op_consistency
