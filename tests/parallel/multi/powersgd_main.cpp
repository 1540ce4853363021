// PowerSGD across processes, over a real backend whose collectives complete
// asynchronously:
//   mpirun -np N powersgd_main --backend mpi
//   ddprun --nproc-per-node N powersgd_main --backend gloo
// Every rank knows every rank's gradients, so each checks its own result
// against the f64 reference of tests/parallel/powersgd_reference.h; then a
// few DDP training steps must leave the same parameters on every rank.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/init.h"
#include "ddp/nn/container.h"
#include "ddp/nn/linear.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/powersgd.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "dist/multi_rank_main.h"
#include "parallel/powersgd_reference.h"

using namespace ddp;
using namespace ddp::parallel;
using namespace ddp::test::powersgd;

namespace {

dist::World g_world;

TEST(PowerSGDAcrossProcesses, MatchesTheReference) {
  const int world = g_world.size(), me = g_world.rank();
  const std::vector<Shape> shapes = {{8, 6}, {8}, {3, 2}, {5, 2, 3}};
  // min_compression_rate 1: at rank 2 the 8x6 and 5x6 matrices are compressed.
  const PowerSGDOptions options{.matrix_approximation_rank = 2, .start_powerSGD_iter = 2,
                                .min_compression_rate = 1.0};
  Reference ref(shapes, world, options.matrix_approximation_rank, options.min_compression_rate,
                options.use_error_feedback, options.warm_start, options.seed);
  CommHook hook = powersgd_hook(options);
  for (int it = 0; it < 5; ++it) {
    std::vector<std::vector<Matrix>> inputs(world);
    for (int r = 0; r < world; ++r)
      for (size_t k = 0; k < shapes.size(); ++k)
        inputs[r].push_back(gradient_values(shape_numel(shapes[k]), r, it * 10 + int(k)));
    GradBucket b = make_bucket(shapes);
    for (size_t k = 0; k < shapes.size(); ++k)
      b.gradients[k].copy_(Tensor::from_vector(inputs[me][k], shapes[k], TensorOptions(DType::f64)));
    reduce(hook, *g_world.group, b);
    std::vector<double> want;
    if (it >= options.start_powerSGD_iter) {
      for (const Matrix& m : ref.step(inputs)) want.insert(want.end(), m.begin(), m.end());
    } else {
      for (size_t k = 0; k < shapes.size(); ++k)
        for (size_t i = 0; i < inputs[0][k].size(); ++i) {
          double s = 0;
          for (int r = 0; r < world; ++r) s += inputs[r][k][i];
          want.push_back(s / world);
        }
    }
    expect_near(b.buffer.to_vector<double>(), want, "iteration " + std::to_string(it));
  }
}

// Several buckets (a small cap) whose Q allreduces run at the end of
// backward, in bucket order on every rank.
TEST(PowerSGDAcrossProcesses, DDPKeepsEveryRanksParametersEqual) {
  manual_seed(5);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(64, 48), std::make_shared<nn::Linear>(48, 48),
      std::make_shared<nn::Linear>(48, 8)});
  DistributedDataParallel<nn::Sequential> ddp_model(model, g_world.group, {.bucket_cap_mb = 0.01});
  auto state = std::make_shared<PowerSGDState>(PowerSGDOptions{.matrix_approximation_rank = 2,
                                                               .start_powerSGD_iter = 2});
  ddp_model.register_comm_hook(powersgd_hook(state));
  optim::SGD opt(model->parameters(), 0.05, {.momentum = 0.9});
  for (int s = 0; s < 6; ++s) {
    Generator gen{uint64_t(100 * g_world.rank() + s)};
    opt.zero_grad();
    Tensor y = ddp_model(randn({4, 64}, {}, &gen));
    sum(y * y).backward();
    opt.step();
  }
  EXPECT_EQ(state->iteration(), 6);
  EXPECT_GT(state->compression_rate(), 2.0);
  for (const Tensor& p : model->parameters()) {
    Tensor mine = p.detach().clone(), first = p.detach().clone();
    g_world.group->broadcast({first}, 0)->wait(std::chrono::milliseconds(60'000));
    EXPECT_TRUE(allclose(mine, first, 0, 0)) << "rank " << g_world.rank() << " " << p.describe();
  }
}

}  // namespace

int main(int argc, char** argv) {
  g_world = test::init_test_world(argc, argv);
  return test::run_tests_on_every_rank(g_world, "powersgd_main");
}
