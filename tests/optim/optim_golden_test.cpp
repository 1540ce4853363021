// SGD and AdamW against torch.optim, step by step; the trajectories come from
// tests/golden/make_optim_golden.py.
#include <gtest/gtest.h>

#include "optim/optim_test_util.h"

namespace ddp::test {
namespace {

struct GoldenCase {
  const char* name;
  DType dtype;
  friend void PrintTo(const GoldenCase& c, std::ostream* os) {
    *os << c.name << (c.dtype == DType::f32 ? " f32" : " f64");
  }
};

class OptimGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(OptimGolden, MatchesTorchAfterEveryStep) {
  const auto [name, dtype] = GetParam();
  // f32 carries ~1e-7 per operation; five steps of a few operations each
  // stay well inside 1e-6 of the parameters' scale.
  const double tol = dtype == DType::f32 ? 1e-6 : 1e-12;
  Tensors params = golden_params(name, dtype);
  auto opt = golden_optimizer(name, params);
  for (int s = 0; s < kGoldenSteps; ++s) {
    set_golden_grads(name, dtype, params, s);
    opt->step();
    EXPECT_LE(golden_error(name, dtype, params, s), tol) << name << " after step " << s + 1;
    for (const Tensor& p : params) EXPECT_EQ(p.dtype(), dtype);
  }
  // The reference really moves, so matching it means something.
  for (int k = 0; k < kGoldenParams; ++k) {
    const Tensor& traj = optim_golden().at(golden_key(name, dtype, k, "params"));
    EXPECT_GT(scaled_error(traj.select(0, kGoldenSteps), traj.select(0, 0)), 1e-3);
  }
}

std::vector<GoldenCase> all_cases() {
  std::vector<GoldenCase> out;
  for (const char* c : {"sgd_plain", "sgd_momentum", "sgd_nesterov", "adamw_default",
                        "adamw_amsgrad", "adamw_groups"})
    for (DType d : {DType::f32, DType::f64}) out.push_back({c, d});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Torch, OptimGolden, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) {
                           return std::string(info.param.name) +
                                  (info.param.dtype == DType::f32 ? "_f32" : "_f64");
                         });

}  // namespace
}  // namespace ddp::test
