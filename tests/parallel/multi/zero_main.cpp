// ZeRO-1 (ddp/parallel/zero.h) against plain DDP, on every rank of a job:
//   mpirun -np N zero_main --backend mpi
//   ddprun --nproc-per-node N zero_main --backend gloo
// Each test trains two copies of one f64 model side by side, one under plain
// DDP with SGD/AdamW and one under DDP + ZeroRedundancyOptimizer, and the
// parameters must agree after every step. With "--reshard-save DIR" or
// "--reshard-resume DIR" only the resharding test runs: a job saves (or
// loads, continues and saves again) its shards, and must continue plain
// DDP's trajectory whatever the world size of the job that saved them.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <unistd.h>

#include "ddp/amp/grad_scaler.h"
#include "ddp/dist/init.h"
#include "ddp/io/safetensors.h"
#include "ddp/nn/activation.h"
#include "ddp/nn/container.h"
#include "ddp/nn/conv.h"
#include "ddp/nn/flatten.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/linear.h"
#include "ddp/optim/clip_grad.h"
#include "ddp/parallel/zero.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "dist/multi_rank_main.h"
#include "nn/scaled_error.h"

using namespace ddp;
using parallel::DDPOptions;
using parallel::DistributedDataParallel;
using parallel::ZeroRedundancyOptimizer;
using Model = nn::Sequential;

namespace {

dist::World g_world;
std::string g_save_dir, g_resume_dir;
int rank() { return g_world.rank(); }
int world() { return g_world.size(); }

constexpr int64_t kBatch = 12;  // divisible by 2, 3 and 4 ranks

// Odd sizes, so that no bucket divides evenly by 2, 3 or 4 ranks.
std::shared_ptr<Model> make_model() {
  manual_seed(11);
  auto m = std::make_shared<Model>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(7, 9), std::make_shared<nn::GELU>(),
      std::make_shared<nn::Linear>(9, 5)});
  m->to(DType::f64);
  return m;
}

// Small buckets: several per model, of odd sizes.
DDPOptions zero_ddp_options() {
  DDPOptions o;
  o.bucket_cap_mb = 0.0003;
  o.rebuild_buckets = false;
  return o;
}

struct Batch {
  Tensor x, y;
};
Batch batch(int step) {
  Generator gen(500 + uint64_t(step));
  return {randn({kBatch, 7}, TensorOptions(DType::f64), &gen),
          randn({kBatch, 5}, TensorOptions(DType::f64), &gen)};
}
Tensor my_rows(const Tensor& t) {
  const int64_t n = t.size(0) / world();
  return t.narrow(0, rank() * n, n);
}

void expect_params_match(nn::Module& got, nn::Module& want, const std::string& where) {
  auto g = got.named_parameters();
  auto w = want.named_parameters();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_LE(test::scaled_error(g.items()[i].second, w.items()[i].second, 1e-12), 1e-10)
        << where << " " << g.items()[i].first;
}

// What a test does after backward and before the optimizer steps, on each side.
struct Extras {
  double clip = 0;              // > 0: clip to this global norm
  bool scaler = false;          // step through a GradScaler
  int inf_at_step = -1;         // that step's gradient gets an inf (skipped)
};

using MakePlain = std::function<std::unique_ptr<optim::Optimizer>(const Tensors&)>;

void train_side_by_side(const MakePlain& plain, const parallel::LocalOptimizerFactory& sharded,
                        int steps, Extras extras = {}) {
  auto ref = make_model();
  auto mine = make_model();
  DistributedDataParallel<Model> ref_ddp(ref, g_world.group, zero_ddp_options());
  DistributedDataParallel<Model> zero_ddp(mine, g_world.group, zero_ddp_options());
  auto opt_ref = plain(ref->parameters());
  ZeroRedundancyOptimizer opt(zero_ddp, sharded);
  amp::GradScaler scaler_ref({.init_scale = 1024.0}), scaler({.init_scale = 1024.0});
  for (int s = 0; s < steps; ++s) {
    Batch b = batch(s);
    auto loss = [&](auto& ddp) {
      Tensor l = nn::functional::mse_loss(ddp(my_rows(b.x)), my_rows(b.y));
      return extras.scaler ? scaler.scale(l) : l;
    };
    loss(ref_ddp).backward();
    loss(zero_ddp).backward();
    if (s == extras.inf_at_step) {
      // An inf in element 0 of the first parameter: plain DDP sees it on every
      // rank, ZeRO only on the rank that owns it.
      NoGradGuard no_grad;
      ref->parameters()[0].grad().view({-1}).narrow(0, 0, 1).fill_(INFINITY);
      for (size_t k = 0; k < opt.segments().size(); ++k)
        if (opt.segments()[k].param == 0 && opt.segments()[k].offset == 0)
          opt.param_groups()[0].params[k].grad().narrow(0, 0, 1).fill_(INFINITY);
    }
    if (extras.scaler) {
      scaler_ref.unscale_(*opt_ref);
      scaler.unscale_(opt);
    }
    if (extras.clip > 0) {
      const double want = optim::clip_grad_norm_(ref->parameters(), extras.clip);
      const double got = opt.clip_grad_norm_(extras.clip);
      if (std::isfinite(want))
        EXPECT_NEAR(got, want, 1e-12 * want) << "step " << s;
      else
        EXPECT_EQ(got, want) << "step " << s;  // the inf reaches every rank's norm
    }
    if (extras.scaler) {
      const bool stepped = scaler.step(opt);
      EXPECT_EQ(stepped, scaler_ref.step(*opt_ref)) << "step " << s;
      EXPECT_EQ(stepped, s != extras.inf_at_step) << "step " << s;
      scaler_ref.update();
      scaler.update();
      EXPECT_EQ(scaler.get_scale(), scaler_ref.get_scale());
    } else {
      opt_ref->step();
      opt.step();
    }
    opt_ref->zero_grad();
    opt.zero_grad();
    opt.synchronize_parameters();
    expect_params_match(*mine, *ref, "step " + std::to_string(s));
  }
}

MakePlain plain_sgd() {
  return [](const Tensors& p) {
    return std::make_unique<optim::SGD>(p, 0.05, optim::SGDOptions{.momentum = 0.9, .weight_decay = 1e-3});
  };
}
MakePlain plain_adamw() {
  return [](const Tensors& p) {
    return std::make_unique<optim::AdamW>(p, 0.01, optim::AdamWOptions{.weight_decay = 0.05});
  };
}
auto zero_sgd = [] { return parallel::zero_sgd(0.05, {.momentum = 0.9, .weight_decay = 1e-3}); };
auto zero_adamw = [] { return parallel::zero_adamw(0.01, {.weight_decay = 0.05}); };

TEST(Zero, SgdMomentumMatchesPlainDDP) { train_side_by_side(plain_sgd(), zero_sgd(), 4); }

TEST(Zero, AdamWMatchesPlainDDP) { train_side_by_side(plain_adamw(), zero_adamw(), 4); }

TEST(Zero, ClippingUsesTheGlobalNorm) {
  train_side_by_side(plain_adamw(), zero_adamw(), 3, {.clip = 0.05});
}

TEST(Zero, GradScalerSkipsOnEveryRankWhenOneShardHasAnInf) {
  train_side_by_side(plain_sgd(), zero_sgd(), 4, {.clip = 0.5, .scaler = true, .inf_at_step = 1});
}

// Each rank holds about 1/N of the optimizer state; together exactly plain's.
TEST(Zero, OptimizerStateIsShardedAcrossRanks) {
  auto ref = make_model();
  auto mine = make_model();
  DistributedDataParallel<Model> ref_ddp(ref, g_world.group, zero_ddp_options());
  DistributedDataParallel<Model> zero_ddp(mine, g_world.group, zero_ddp_options());
  auto opt_ref = plain_sgd()(ref->parameters());
  ZeroRedundancyOptimizer opt(zero_ddp, zero_sgd());
  Batch b = batch(0);
  nn::functional::mse_loss(ref_ddp(my_rows(b.x)), my_rows(b.y)).backward();
  nn::functional::mse_loss(zero_ddp(my_rows(b.x)), my_rows(b.y)).backward();
  opt_ref->step();
  opt.step();
  const double plain = double(parallel::optimizer_state_bytes(*opt_ref));
  const double mine_bytes = double(opt.state_bytes());
  ASSERT_GT(plain, 0);
  // Padding: each bucket's chunk is ceil(B / N), at most one element more.
  EXPECT_LE(mine_bytes / plain, 1.0 / world() + 0.05) << "rank " << rank();
  Tensor total = Tensor::full({1}, mine_bytes, TensorOptions(DType::f64));
  g_world.group->allreduce({total})->wait(g_world.group->timeout());
  EXPECT_EQ(total.item<double>(), plain);
}

class Adagrad : public optim::Optimizer {  // any optimizer but SGD and AdamW
 public:
  explicit Adagrad(std::vector<optim::ParamGroup> g) : Optimizer("Adagrad", std::move(g), 0.1, 0) {}

 protected:
  void update_group(const optim::ParamGroup&, const Tensors&, const Tensors&,
                    const std::vector<TensorDict*>&) override {}
  TensorDict options_state() const override { return {}; }
  void load_options(const TensorDict&) override {}
  std::vector<std::string> state_names() const override { return {}; }
};

TEST(Zero, BadInputsRaiseValueError) {
  auto model = make_model();
  DDPOptions rebuilding = zero_ddp_options();
  rebuilding.rebuild_buckets = true;
  {
    DistributedDataParallel<Model> ddp(model, g_world.group, rebuilding);
    EXPECT_THROW(ZeroRedundancyOptimizer(ddp, zero_sgd()), ValueError);
  }
  DistributedDataParallel<Model> ddp(model, g_world.group, zero_ddp_options());
  try {
    ZeroRedundancyOptimizer opt(ddp, [](std::vector<optim::ParamGroup> g) {
      return std::unique_ptr<optim::Optimizer>(std::make_unique<Adagrad>(std::move(g)));
    });
    ADD_FAILURE() << "an Adagrad shard was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported optimizer 'Adagrad'"), std::string::npos)
        << e.what();
  }
  ZeroRedundancyOptimizer opt(ddp, zero_adamw());
  Batch b = batch(0);
  nn::functional::mse_loss(ddp(my_rows(b.x)), my_rows(b.y)).backward();
  opt.step();
  TensorDict mine = opt.sharded_state_dict();
  // Only this rank's shard, when the saving job had more ranks.
  if (world() > 1) {
    try {
      opt.load_sharded_state_dict({mine});
      ADD_FAILURE() << "one shard of " << world() << " was accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("job of " + std::to_string(world()) + " ranks"),
                std::string::npos)
          << e.what();
    }
  }
  // Shards of a different model.
  std::vector<TensorDict> all;
  for (int r = 0; r < world(); ++r) {
    TensorDict d = mine;  // a copy with rank r
    d.set("zero.rank", Tensor::scalar(double(r), DType::f64));
    d.set("zero.numels", Tensor::from_vector(std::vector<int64_t>{3, 4}, {2}));
    all.push_back(d);
  }
  EXPECT_THROW(opt.load_sharded_state_dict(all), ValueError);
  EXPECT_THROW(opt.load_sharded_state_dict({}), ValueError);
  EXPECT_THROW(opt.load_shards("/nonexistent/zero"), ValueError);
  EXPECT_THROW(opt.load_state_dict(opt.state_dict()), ValueError);
  opt.synchronize_parameters();
}

// ---- channels-last models ---------------------------------------------------------

// Two convolutions (4-D weights) and a linear layer, f64.
std::shared_ptr<Model> make_conv_model() {
  manual_seed(13);
  auto m = std::make_shared<Model>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Conv2d>(3, 5, 3, 1, 1), std::make_shared<nn::GELU>(),
      std::make_shared<nn::Conv2d>(5, 3, 3, 2, 1), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(3 * 3 * 3, 4)});
  m->to(DType::f64);
  return m;
}
Batch conv_batch(int step) {
  Generator gen(700 + uint64_t(step));
  return {randn({kBatch, 3, 5, 5}, TensorOptions(DType::f64), &gen),
          randn({kBatch, 4}, TensorOptions(DType::f64), &gen)};
}

// A directory every rank of this job names alike (rank 0's pid).
std::string job_dir(const std::string& what) {
  Tensor id = Tensor::full({1}, rank() == 0 ? double(::getpid()) : 0.0, TensorOptions(DType::f64));
  g_world.group->allreduce({id})->wait(g_world.group->timeout());
  return (std::filesystem::temp_directory_path() /
          (what + "_" + std::to_string(int64_t(id.item<double>()))))
      .string();
}

// Note [ZeRO-1 checkpoints across layouts]: ZeRO over a channels-last model
// follows plain DDP of the contiguous one; its shards, saved, resume a
// contiguous ZeRO job that keeps following it.
TEST(ZeroChannelsLast, FollowsContiguousPlainDDPAndResumesAcrossLayouts) {
  auto ref = make_conv_model();
  auto cl = make_conv_model();
  cl->to(MemoryFormat::channels_last);
  DistributedDataParallel<Model> ref_ddp(ref, g_world.group, zero_ddp_options());
  auto opt_ref = plain_adamw()(ref->parameters());
  auto step_ref = [&](int s) {
    Batch b = conv_batch(s);
    nn::functional::mse_loss(ref_ddp(my_rows(b.x)), my_rows(b.y)).backward();
    opt_ref->step();
    opt_ref->zero_grad();
  };
  auto step_zero = [&](DistributedDataParallel<Model>& ddp, ZeroRedundancyOptimizer& opt, int s,
                       bool nhwc) {
    Batch b = conv_batch(s);
    Tensor x = my_rows(b.x);
    if (nhwc) x = nn::functional::to_channels_last(x);
    nn::functional::mse_loss(ddp(x), my_rows(b.y)).backward();
    opt.step();
    opt.zero_grad();
  };
  const std::string dir = job_dir("zero_channels_last");
  {
    DistributedDataParallel<Model> cl_ddp(cl, g_world.group, zero_ddp_options());
    ZeroRedundancyOptimizer opt(cl_ddp, zero_adamw());
    for (int s = 0; s < 3; ++s) {
      step_ref(s);
      step_zero(cl_ddp, opt, s, true);
      opt.synchronize_parameters();
      expect_params_match(*cl, *ref, "channels-last step " + std::to_string(s));
    }
    for (const Tensor& p : cl->parameters())
      if (p.dim() == 4) EXPECT_TRUE(nn::functional::is_channels_last(p)) << p.describe();
    if (rank() == 0) std::filesystem::remove_all(dir);
    g_world.group->barrier()->wait(g_world.group->timeout());
    opt.save_shard(dir);
    g_world.group->barrier()->wait(g_world.group->timeout());
  }
  auto contig = make_conv_model();
  contig->load_state_dict(cl->state_dict());
  DistributedDataParallel<Model> contig_ddp(contig, g_world.group, zero_ddp_options());
  ZeroRedundancyOptimizer opt(contig_ddp, zero_adamw());
  opt.load_shards(dir);
  for (int s = 3; s < 6; ++s) {
    step_ref(s);
    step_zero(contig_ddp, opt, s, false);
    opt.synchronize_parameters();
    expect_params_match(*contig, *ref, "resumed contiguous step " + std::to_string(s));
  }
  g_world.group->barrier()->wait(g_world.group->timeout());
  if (rank() == 0) std::filesystem::remove_all(dir);
}

// Note [ZeRO-1 checkpoints]: save at one world size, resume at another.
// Phase "save" trains steps [0, 3); phase "resume" loads the model and the
// shards, trains 3 more steps and saves again. Each phase compares with a
// plain-DDP AdamW run of all steps so far, from the same start.
constexpr int kStepsPerPhase = 3;

void reshard_phase(const std::string& load_dir, const std::string& save_dir) {
  auto ref = make_model();
  auto mine = make_model();
  DistributedDataParallel<Model> ref_ddp(ref, g_world.group, zero_ddp_options());
  auto opt_ref = plain_adamw()(ref->parameters());
  int first = 0;
  if (!load_dir.empty()) {
    TensorDict meta = io::load_safetensors(load_dir + "/model.safetensors");
    first = int(meta.at("steps_done").item<double>());
    meta.erase("steps_done");
    mine->load_state_dict(meta);
  }
  DistributedDataParallel<Model> zero_ddp(mine, g_world.group, zero_ddp_options());
  ZeroRedundancyOptimizer opt(zero_ddp, zero_adamw());
  if (!load_dir.empty()) opt.load_shards(load_dir);
  const int last = first + kStepsPerPhase;
  for (int s = 0; s < last; ++s) {
    Batch b = batch(s);
    nn::functional::mse_loss(ref_ddp(my_rows(b.x)), my_rows(b.y)).backward();
    opt_ref->step();
    opt_ref->zero_grad();
    if (s < first) continue;
    nn::functional::mse_loss(zero_ddp(my_rows(b.x)), my_rows(b.y)).backward();
    opt.step();
    opt.zero_grad();
  }
  opt.synchronize_parameters();
  expect_params_match(*mine, *ref, "after step " + std::to_string(last) + " at " +
                                       std::to_string(world()) + " ranks");
  const std::string out = save_dir;
  if (rank() == 0) std::filesystem::remove_all(out);  // shards of an earlier run
  g_world.group->barrier()->wait(g_world.group->timeout());
  opt.save_shard(out);
  if (rank() == 0) {
    TensorDict state = mine->state_dict();
    state.insert("steps_done", Tensor::scalar(double(last), DType::f64));
    io::save_safetensors(out + "/model.safetensors", state);
  }
  g_world.group->barrier()->wait(g_world.group->timeout());
}

TEST(ZeroReshard, ContinuesPlainTrajectoryAtAnotherWorldSize) {
  if (g_save_dir.empty()) GTEST_SKIP() << "run with --reshard-save DIR [--reshard-resume DIR]";
  reshard_phase(g_resume_dir, g_save_dir);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--reshard-save") g_save_dir = argv[i + 1];
    if (std::string(argv[i]) == "--reshard-resume") g_resume_dir = argv[i + 1];
  }
  if (!g_save_dir.empty()) ::testing::GTEST_FLAG(filter) = "ZeroReshard.*";
  g_world = test::init_test_world(argc, argv);
  return test::run_tests_on_every_rank(g_world, "zero_main");
}
