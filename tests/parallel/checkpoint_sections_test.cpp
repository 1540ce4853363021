// One checkpoint holds all of a DDP job's state (issue 29 item 6): ZeRO-1
// shards, PowerSGD's per-rank memory and the bucket plan of a rebuild or of
// auto_bucket_size are sections beside the model (ddp/parallel/
// checkpoint_sections.h). Gloo ranks as threads: a run saved at step K and
// resumed by a fresh job equals the uninterrupted run bit for bit, per mode;
// without the mode's section it does not (or cannot) continue the same way.

#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>
#include <thread>

#include "ddp/config.h"
#include "ddp/io/async_checkpoint.h"
#include "ddp/io/checkpoint.h"
#include "ddp/nn/activation.h"
#include "ddp/nn/container.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/linear.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/bucket_tuner.h"
#include "ddp/parallel/checkpoint_sections.h"
#include "ddp/parallel/powersgd.h"
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
using Model = nn::Sequential;

namespace {

#if DDP_HAVE_GLOO

enum class Mode { zero, powersgd, auto_buckets };

// Ranks are threads sharing the default generator: one model at a time, so
// that every rank (rank 0 above all, whose weights DDP broadcasts) draws
// the same initial weights in every job.
std::shared_ptr<Model> make_model(uint64_t seed) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  manual_seed(seed);
  auto m = std::make_shared<Model>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(5, 16), std::make_shared<nn::GELU>(),
      std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::GELU>(),
      std::make_shared<nn::Linear>(16, 3)});
  m->to(DType::f64);
  return m;
}

DDPOptions options_for(Mode mode) {
  DDPOptions o;
  o.bucket_cap_mb = 0.001;  // several buckets
  o.rebuild_buckets = mode != Mode::zero;
  o.auto_bucket_size = mode == Mode::auto_buckets;
  o.auto_bucket_iterations = 2;
  return o;
}

// One rank of a job: the model under DDP, its optimizer, the mode's state,
// and a checkpoint of all of it (`with_mode_sections` off: only the model,
// the optimizer where it is not ZeRO's, and the generator).
struct Rank {
  std::shared_ptr<Model> model;
  std::unique_ptr<DistributedDataParallel<Model>> ddp;
  std::unique_ptr<optim::Optimizer> opt;
  parallel::ZeroRedundancyOptimizer* zero = nullptr;
  std::shared_ptr<parallel::PowerSGDState> powersgd;
  io::Checkpoint ckpt;

  Rank(Mode mode, std::shared_ptr<dist::ProcessGroup> group, uint64_t seed, bool with_mode_sections) {
    model = make_model(seed);
    ddp = std::make_unique<DistributedDataParallel<Model>>(model, group, options_for(mode));
    if (mode == Mode::zero) {
      auto z = std::make_unique<parallel::ZeroRedundancyOptimizer>(*ddp, parallel::zero_adamw(0.01));
      zero = z.get();
      opt = std::move(z);
    } else {
      opt = std::make_unique<optim::SGD>(model->parameters(), 0.05,
                                         optim::SGDOptions{.momentum = 0.9});
    }
    if (mode == Mode::powersgd) {
      powersgd = std::make_shared<parallel::PowerSGDState>(
          parallel::PowerSGDOptions{.matrix_approximation_rank = 1, .start_powerSGD_iter = 2});
      ddp->register_comm_hook(parallel::powersgd_hook(powersgd));
    }
    ckpt.add("model", model);
    if (!zero) ckpt.add("optimizer", *opt);
    if (!with_mode_sections) return;
    if (zero) parallel::add_checkpoint_section(ckpt, "optimizer", *zero);
    if (powersgd) parallel::add_checkpoint_section(ckpt, "powersgd", powersgd);
    parallel::add_checkpoint_section(ckpt, "buckets", *ddp);
  }

  void step(int s, int rank) {
    Generator gen(1000 + 10 * uint64_t(s) + uint64_t(rank));
    Tensor x = randn({4, 5}, TensorOptions(DType::f64), &gen);
    Tensor y = randn({4, 3}, TensorOptions(DType::f64), &gen);
    nn::functional::mse_loss((*ddp)(x), y).backward();
    opt->step();
    opt->zero_grad();
  }

  std::vector<double> parameters() {
    if (zero) zero->synchronize_parameters();
    std::vector<double> out;
    for (const Tensor& p : model->parameters()) {
      std::vector<double> v = p.contiguous().to_vector<double>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

// Runs fn(rank, group) on `world` gloo ranks as threads; the errors by rank.
std::vector<std::string> on_gloo_ranks(
    int world, const std::function<void(int, std::shared_ptr<dist::ProcessGroup>)>& fn) {
  auto server = std::make_shared<dist::TCPStore>(dist::test::server_options(std::chrono::seconds(60)));
  auto errors = std::vector<std::string>(size_t(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        std::shared_ptr<dist::Store> store = server;
        if (r > 0)
          store = std::make_shared<dist::TCPStore>(
              dist::test::client_options(server->port(), std::chrono::seconds(60)));
        fn(r, dist::ProcessGroupGloo::create(store, r, world));
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

constexpr int kSaveAt = 5, kSteps = 9;

// The uninterrupted run, saving at kSaveAt: rank 0's final parameters.
std::vector<double> run_through(Mode mode, int world, const std::string& dir) {
  std::vector<double> out;
  expect_no_errors(on_gloo_ranks(world, [&](int rank, auto group) {
    Rank job(mode, group, 7, true);
    for (int s = 0; s < kSteps; ++s) {
      if (s == kSaveAt) {
        if (job.zero) job.zero->synchronize_parameters();
        io::save_checkpoint(dir, job.ckpt, parallel::checkpoint_save_options(group, {.step = s}));
      }
      job.step(s, rank);
    }
    auto p = job.parameters();
    if (rank == 0) out = p;
  }));
  return out;
}

// A fresh job (other initial weights) that loads the checkpoint and runs on.
std::vector<double> resume(Mode mode, int world, const std::string& dir, bool with_mode_sections,
                           const std::function<void(Rank&)>& after_load = {}) {
  std::vector<double> out;
  expect_no_errors(on_gloo_ranks(world, [&](int rank, auto group) {
    Rank job(mode, group, 99, with_mode_sections);
    const io::CheckpointInfo info = io::load_checkpoint(
        dir, job.ckpt, parallel::checkpoint_load_options(*group, {.strict = with_mode_sections}));
    if (after_load) after_load(job);
    for (int s = int(info.step); s < kSteps; ++s) job.step(s, rank);
    auto p = job.parameters();
    if (rank == 0) out = p;
  }));
  return out;
}

TEST(CheckpointSections, ZeroShardsResumeBitForBitAndNeedTheirSection) {
  test::ScratchDir dir;
  const std::string path = dir.path("ckpt");
  const std::vector<double> through = run_through(Mode::zero, 2, path);
  ASSERT_FALSE(through.empty());
  const io::CheckpointInfo info = io::read_checkpoint_info(path);
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.per_rank_sections, std::vector<std::string>{"optimizer"});
  EXPECT_EQ(resume(Mode::zero, 2, path, true), through);
  // Without the shards AdamW starts from zero moments: another trajectory.
  EXPECT_NE(resume(Mode::zero, 2, path, false), through);
  // The shards of 2 ranks reshard to 3 (the continuation then differs, as
  // each rank's batch does).
  expect_no_errors(on_gloo_ranks(3, [&](int, auto group) {
    Rank job(Mode::zero, group, 99, true);
    io::load_checkpoint(path, job.ckpt, parallel::checkpoint_load_options(*group));
    EXPECT_GT(job.zero->state_bytes(), 0u);
  }));
}

TEST(CheckpointSections, PowerSGDStateAndBucketPlanResumeBitForBit) {
  test::ScratchDir dir;
  const std::string path = dir.path("ckpt");
  const std::vector<double> through = run_through(Mode::powersgd, 2, path);
  ASSERT_FALSE(through.empty());
  EXPECT_EQ(io::read_checkpoint_info(path).per_rank_sections,
            std::vector<std::string>{"powersgd"});
  EXPECT_EQ(resume(Mode::powersgd, 2, path, true, [](Rank& job) {
              EXPECT_TRUE(job.ddp->reducer().buckets_rebuilt());  // the saved plan, installed
            }),
            through);
  // Without PowerSGD's error memory and Q the compressed steps differ.
  EXPECT_NE(resume(Mode::powersgd, 2, path, false), through);

  // PowerSGD's memory is per rank: another world size is refused, naming
  // both, and the model is left as it was.
  auto errors = on_gloo_ranks(3, [&](int, auto group) {
    Rank job(Mode::powersgd, group, 99, true);
    const std::vector<double> before = job.parameters();
    try {
      io::load_checkpoint(path, job.ckpt, parallel::checkpoint_load_options(*group));
      ADD_FAILURE() << "loaded PowerSGD state of 2 ranks at 3";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("saved by 2 ranks, loaded by 3"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(job.parameters(), before);
  });
  expect_no_errors(errors);
}

TEST(CheckpointSections, AutoBucketPlanResumesWithoutTuningAgain) {
  test::ScratchDir dir;
  const std::string path = dir.path("ckpt");
  // Three ranks: the order of a ring's sums depends on the buckets.
  const std::vector<double> through = run_through(Mode::auto_buckets, 3, path);
  ASSERT_FALSE(through.empty());
  EXPECT_EQ(resume(Mode::auto_buckets, 3, path, true,
                   [&](Rank& job) {
                     ASSERT_NE(job.ddp->bucket_tuner(), nullptr);
                     EXPECT_TRUE(job.ddp->bucket_tuner()->done());
                     EXPECT_EQ(job.ddp->bucket_tuner()->plan().buckets,
                               job.ddp->reducer().bucket_assignment());
                   }),
            through);
}

// io::AsyncCheckpointer with per-rank sections: the writer threads agree
// through the store while the ranks train on (Note [Asynchronous
// checkpoints]); the result equals the synchronous save's.
TEST(CheckpointSections, AsynchronousPerRankSavesAgreeThroughTheStore) {
  test::ScratchDir dir;
  const std::string path = dir.path("ckpt");
  const std::vector<double> through = run_through(Mode::powersgd, 2, dir.path("sync"));
  std::vector<double> out;
  auto server = std::make_shared<dist::TCPStore>(dist::test::server_options(std::chrono::seconds(60)));
  expect_no_errors(on_gloo_ranks(2, [&](int rank, auto group) {
    std::shared_ptr<dist::Store> store = server;
    if (rank > 0)
      store = std::make_shared<dist::TCPStore>(
          dist::test::client_options(server->port(), std::chrono::seconds(60)));
    io::Exchange exchange = parallel::checkpoint_store_exchange(store, rank, 2);
    Rank job(Mode::powersgd, group, 7, true);
    io::AsyncCheckpointer saver;
    for (int s = 0; s < kSteps; ++s) {
      if (s == kSaveAt - 2 || s == kSaveAt)  // two saves: the second waits for the first
        saver.save(path, job.ckpt,
                   {.rank = rank, .step = s, .world_size = 2, .exchange = exchange});
      job.step(s, rank);
    }
    saver.wait();
    if (rank == 0) out = job.parameters();
  }));
  EXPECT_EQ(out, through);
  EXPECT_EQ(io::read_checkpoint_info(path).step, kSaveAt);
  EXPECT_EQ(io::read_checkpoint_info(path).generation, 2u);
  EXPECT_EQ(resume(Mode::powersgd, 2, path, true), through);
}

TEST(CheckpointSections, BadBucketPlansAreRefusedAndChangeNothing) {
  expect_no_errors(on_gloo_ranks(1, [&](int, auto group) {
    Rank job(Mode::powersgd, group, 1, true);
    const auto before = job.ddp->reducer().bucket_assignment();
    TensorDict good = job.ddp->bucket_plan_state();
    auto expect_refused = [&](TensorDict state, const std::string& needle) {
      try {
        job.ddp->load_bucket_plan_state(state);
        ADD_FAILURE() << "accepted a plan; expected an error mentioning '" << needle << "'";
      } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
      EXPECT_EQ(job.ddp->reducer().bucket_assignment(), before);
    };
    const int64_t n = good.at("buckets.params").numel();
    TensorDict twice = good;
    std::vector<int64_t> params(size_t(n), 0);
    twice.set("buckets.params", Tensor::from_vector(params, {n}));
    expect_refused(twice, "listed twice");
    TensorDict split = good;
    split.set("buckets.sizes", Tensor::from_vector(std::vector<int64_t>{n + 1}, {1}));
    expect_refused(split, "does not split");
    TensorDict missing = good;
    missing.erase("buckets.rebuilt");
    expect_refused(missing, "no 'buckets.rebuilt'");
    TensorDict beyond = good;
    params.assign(size_t(n), 0);
    for (int64_t i = 0; i < n; ++i) params[size_t(i)] = i + 1;
    beyond.set("buckets.params", Tensor::from_vector(params, {n}));
    expect_refused(beyond, "names parameter");
  }));
  // A DDP whose buckets never change (as ZeRO-1 needs) refuses another plan.
  expect_no_errors(on_gloo_ranks(1, [&](int, auto group) {
    Rank job(Mode::zero, group, 1, true);
    TensorDict other = job.ddp->bucket_plan_state();
    const int64_t n = other.at("buckets.params").numel();
    other.set("buckets.sizes", Tensor::from_vector(std::vector<int64_t>{n}, {1}));
    if (job.ddp->reducer().num_buckets() == 1) GTEST_SKIP() << "one bucket only";
    try {
      job.ddp->load_bucket_plan_state(other);
      ADD_FAILURE() << "a fixed DDP accepted another plan";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("never changes its buckets"), std::string::npos)
          << e.what();
    }
  }));
}

#endif  // DDP_HAVE_GLOO

}  // namespace
