// The PowerSGD hook against PyTorch 1.13's own powerSGD_hook
// (tests/golden/make_powersgd_golden.py): 2 ranks (threads here, gloo
// processes there), rank 2, min_compression_rate 1, error feedback and warm
// start, 2 plain and 3 compressed iterations, both starting from torch's
// random Q (given to the state with set_q_memory).

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "golden_file.h"
#include "parallel/powersgd_reference.h"
#include "parallel/thread_group.h"

using namespace ddp;
using namespace ddp::parallel;
using namespace ddp::test::powersgd;

namespace {

const std::vector<Shape> kShapes = {{8, 6}, {8}, {3, 2}, {5, 2, 3}};  // the script's SHAPES

const Tensor& golden(const std::string& name) {
  const nn::TensorDict& file = ddp::test::golden_file("powersgd");
  return file.at(name);
}

}  // namespace

TEST(PowerSGDGolden, MatchesTorchPowerSGDHook) {
  const int world = 2, iters = 5;
  auto groups = ddp::test::thread_groups(world);
  std::vector<std::vector<std::vector<double>>> results(world);
  ddp::test::on_every_rank(world, [&](int r) {
    auto state = std::make_shared<PowerSGDState>(PowerSGDOptions{
        .matrix_approximation_rank = 2, .start_powerSGD_iter = 2, .min_compression_rate = 1.0});
    state->set_q_memory(0, golden("q_init"));
    CommHook hook = powersgd_hook(state);
    for (int it = 0; it < iters; ++it) {
      GradBucket b = make_bucket(kShapes);
      b.buffer.copy_(golden("in.r" + std::to_string(r) + ".it" + std::to_string(it)));
      reduce(hook, *groups[r], b);
      results[r].push_back(b.buffer.to_vector<double>());
    }
  });
  for (int it = 0; it < iters; ++it) {
    const std::vector<double> want = golden("out.it" + std::to_string(it)).to_vector<double>();
    for (int r = 0; r < world; ++r)
      expect_near(results[r][it], want, "iteration " + std::to_string(it) + " rank " + std::to_string(r));
  }
  // The compressed iterations are not plain averages (the comparison above
  // would pass for a hook that only averaged if the golden were plain too).
  const std::vector<double> in0 = golden("in.r0.it4").to_vector<double>();
  const std::vector<double> in1 = golden("in.r1.it4").to_vector<double>();
  double largest_gap = 0;
  for (size_t i = 0; i < in0.size(); ++i)
    largest_gap = std::max(largest_gap, std::abs(results[0][4][i] - (in0[i] + in1[i]) / 2));
  EXPECT_GT(largest_gap, 1e-3);
}

TEST(PowerSGDGolden, SetQMemoryChecksItsArguments) {
  auto state = std::make_shared<PowerSGDState>(PowerSGDOptions{.start_powerSGD_iter = 0,
                                                               .use_error_feedback = false,
                                                               .warm_start = false});
  EXPECT_THROW(state->set_q_memory(0, Tensor::zeros({4})), ValueError);  // needs warm start
  auto warm = std::make_shared<PowerSGDState>(PowerSGDOptions{.start_powerSGD_iter = 2});
  EXPECT_THROW(warm->set_q_memory(0, Tensor::zeros({2, 2})), ValueError);  // not flat
  EXPECT_THROW(warm->set_q_memory(0, Tensor()), ValueError);
  warm->set_q_memory(0, Tensor::zeros({5}, DType::f64));  // an 8x6 matrix at rank 1 needs 6
  CommHook hook = powersgd_hook(warm);
  auto group = ddp::test::solo();
  for (int it = 0; it < 2; ++it) {
    GradBucket b = make_bucket({{8, 6}});
    reduce(hook, *group, b);
  }
  GradBucket b = make_bucket({{8, 6}});
  try {
    reduce(hook, *group, b);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a Q of 6 elements"), std::string::npos) << e.what();
  }
}
