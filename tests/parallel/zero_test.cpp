// ZeroRedundancyOptimizer in one process: a gloo world of one (equal to a
// plain optimizer, checkpoint files, bad inputs) and three gloo ranks as
// threads (the shards partition the model). The multi-process trajectory and
// resharding tests are tests/parallel/multi/zero_main.cpp.

#include <gtest/gtest.h>

#include <fstream>
#include <mutex>
#include <thread>

#include "ddp/config.h"
#include "ddp/nn/activation.h"
#include "ddp/nn/container.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/linear.h"
#include "ddp/parallel/zero.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "dist/store_test_util.h"
#include "scratch_dir.h"
#if DDP_HAVE_GLOO
#include "ddp/dist/process_group_gloo.h"
#endif

using namespace ddp;
using parallel::DDPOptions;
using parallel::DistributedDataParallel;
using parallel::ZeroRedundancyOptimizer;
using Model = nn::Sequential;

namespace {

#if DDP_HAVE_GLOO

std::shared_ptr<Model> make_model() {
  manual_seed(3);
  auto m = std::make_shared<Model>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(5, 6), std::make_shared<nn::GELU>(),
      std::make_shared<nn::Linear>(6, 3)});
  m->to(DType::f64);
  return m;
}

DDPOptions options() {
  DDPOptions o;
  o.bucket_cap_mb = 0.0002;  // a few small buckets
  o.rebuild_buckets = false;
  return o;
}

std::shared_ptr<dist::ProcessGroup> world_of_one() {
  auto store = std::make_shared<dist::TCPStore>(dist::test::server_options(std::chrono::seconds(20)));
  return dist::ProcessGroupGloo::create(store, 0, 1);
}

Tensor loss_of(DistributedDataParallel<Model>& m, int step) {
  Generator gen(40 + uint64_t(step));
  Tensor x = randn({4, 5}, TensorOptions(DType::f64), &gen);
  Tensor y = randn({4, 3}, TensorOptions(DType::f64), &gen);
  return nn::functional::mse_loss(m(x), y);
}

TEST(ZeroWorldOfOne, MatchesThePlainOptimizerAndRoundTripsItsState) {
  auto group = world_of_one();
  auto ref = make_model();
  auto mine = make_model();
  DistributedDataParallel<Model> ref_ddp(ref, group, options());
  DistributedDataParallel<Model> zero_ddp(mine, group, options());
  optim::AdamW opt_ref(ref->parameters(), 0.01);
  ZeroRedundancyOptimizer opt(zero_ddp, parallel::zero_adamw(0.01));
  EXPECT_EQ(opt.name(), "ZeroRedundancyOptimizer");
  EXPECT_GT(zero_ddp.reducer().num_buckets(), 1u);
  for (int s = 0; s < 3; ++s) {
    loss_of(ref_ddp, s).backward();
    loss_of(zero_ddp, s).backward();
    opt_ref.step();
    opt.step();
    opt_ref.zero_grad();
    opt.zero_grad();
  }
  opt.synchronize_parameters();
  auto a = mine->parameters(), b = ref->parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(allclose(a[i], b[i], 1e-13, 0.0)) << "parameter " << i;
  // One rank holds all the state: as many bytes as the plain optimizer.
  EXPECT_EQ(opt.state_bytes(), parallel::optimizer_state_bytes(opt_ref));

  test::ScratchDir dir;
  opt.save_shard(dir.path("ckpt"));
  EXPECT_EQ(std::filesystem::exists(dir.path("ckpt/zero_shard_0_of_1.safetensors")), true);
  // A second optimizer needs its own DDP: one communication hook per model.
  EXPECT_THROW(ZeroRedundancyOptimizer(zero_ddp, parallel::zero_adamw(0.5)), ValueError);
  auto other = make_model();
  DistributedDataParallel<Model> other_ddp(other, group, options());
  ZeroRedundancyOptimizer fresh(other_ddp, parallel::zero_adamw(0.5));
  fresh.load_shards(dir.path("ckpt"));
  EXPECT_EQ(*fresh.param_groups()[0].lr, 0.01);  // the saved options, as torch loads them
  const TensorDict saved = opt.sharded_state_dict(), loaded = fresh.sharded_state_dict();
  ASSERT_EQ(saved.size(), loaded.size());
  for (const auto& [key, t] : saved)
    EXPECT_TRUE(allclose(t.to(DType::f64), loaded.at(key).to(DType::f64), 0.0, 0.0)) << key;
}

TEST(ZeroWorldOfOne, BadInputsRaiseValueErrorNamingTheProblem) {
  auto group = world_of_one();
  auto model = make_model();
  auto expect_error = [](const std::function<void()>& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  {
    DDPOptions o = options();
    o.find_unused_parameters = true;
    DistributedDataParallel<Model> ddp(model, group, o);
    expect_error([&] { ZeroRedundancyOptimizer(ddp, parallel::zero_sgd(0.1)); },
                 "find_unused_parameters");
  }
  {
    DistributedDataParallel<Model> ddp(model, group, DDPOptions{});
    expect_error([&] { ZeroRedundancyOptimizer(ddp, parallel::zero_sgd(0.1)); },
                 "rebuild_buckets = false");
  }
  DistributedDataParallel<Model> ddp(model, group, options());
  expect_error([&] { ZeroRedundancyOptimizer(ddp, nullptr); }, "no local optimizer factory");
  expect_error([&] { ZeroRedundancyOptimizer(ddp, parallel::zero_sgd(-1.0)); }, "lr");
  ZeroRedundancyOptimizer opt(ddp, parallel::zero_sgd(0.1, {.momentum = 0.9}));
  test::ScratchDir dir;
  expect_error([&] { opt.load_shards(dir.path("missing")); }, "is not a directory");
  std::filesystem::create_directories(dir.path("empty"));
  expect_error([&] { opt.load_shards(dir.path("empty")); }, "no zero_shard_");
  std::filesystem::create_directories(dir.path("mixed"));
  std::ofstream(dir.path("mixed/zero_shard_0_of_2.safetensors")) << "x";
  std::ofstream(dir.path("mixed/zero_shard_0_of_3.safetensors")) << "x";
  expect_error([&] { opt.load_shards(dir.path("mixed")); }, "2 different world sizes");
  std::filesystem::create_directories(dir.path("partial"));
  std::ofstream(dir.path("partial/zero_shard_0_of_2.safetensors")) << "x";
  expect_error([&] { opt.load_shards(dir.path("partial")); }, "rank 1 of 2 is missing");
  expect_error([&] { opt.load_sharded_state_dict({TensorDict{}}); }, "zero.world_size");
  expect_error([&] { opt.clip_grad_norm_(-1.0); }, "max_norm");
}

// Three ranks as threads: every element of every parameter belongs to
// exactly one rank's shard.
TEST(ZeroThreads, ShardsPartitionTheModel) {
  constexpr int kWorld = 3;
  auto server = std::make_shared<dist::TCPStore>(dist::test::server_options(std::chrono::seconds(20)));
  std::mutex mu;
  std::vector<parallel::ZeroSegment> all;
  std::vector<int64_t> numels;
  std::vector<std::string> errors;
  auto run = [&](int rank) {
    try {
      std::shared_ptr<dist::Store> store = server;
      if (rank > 0)
        store = std::make_shared<dist::TCPStore>(
            dist::test::client_options(server->port(), std::chrono::seconds(20)));
      auto group = dist::ProcessGroupGloo::create(store, rank, kWorld);
      auto model = make_model();
      DistributedDataParallel<Model> ddp(model, group, options());
      ZeroRedundancyOptimizer opt(ddp, parallel::zero_sgd(0.1));
      std::lock_guard<std::mutex> lk(mu);
      all.insert(all.end(), opt.segments().begin(), opt.segments().end());
      if (rank == 0)
        for (const Tensor& p : model->parameters()) numels.push_back(p.numel());
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu);
      errors.push_back(e.what());
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) threads.emplace_back(run, r);
  for (auto& t : threads) t.join();
  ASSERT_TRUE(errors.empty()) << errors.front();
  std::vector<std::vector<int>> covered(numels.size());
  for (size_t i = 0; i < numels.size(); ++i) covered[i].assign(size_t(numels[i]), 0);
  for (const auto& s : all)
    for (int64_t e = s.offset; e < s.offset + s.length; ++e) ++covered[s.param][size_t(e)];
  for (size_t i = 0; i < numels.size(); ++i)
    for (size_t e = 0; e < covered[i].size(); ++e)
      EXPECT_EQ(covered[i][e], 1) << "parameter " << i << " element " << e;
}

#endif  // DDP_HAVE_GLOO

}  // namespace
