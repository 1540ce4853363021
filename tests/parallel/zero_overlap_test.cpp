// ZeroRedundancyOptimizer with overlap_with_forward (Note [ZeRO-1 overlapped
// with the forward] in ddp/parallel/zero.h): f64 trajectories, optimizer
// state and checkpoints equal the non-overlapped ZeRO-1's bit for bit at 2
// and 3 gloo ranks (threads of one process) — SGD with momentum and a
// scheduler, AdamW, no_sync accumulation, clipping through the global norm,
// a GradScaler skip decided by one rank's shard, two steps before a forward
// — and plain DDP's at 2 ranks; the all-gathers are issued first layers
// first, alike on every rank, and each layer waits only for its own
// buckets; a world of one; the bad inputs.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ddp/amp/grad_scaler.h"
#include "ddp/config.h"
#include "ddp/nn/container.h"
#include "ddp/nn/linear.h"
#include "ddp/optim/adamw.h"
#include "ddp/optim/clip_grad.h"
#include "ddp/optim/lr_scheduler.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/join.h"
#include "ddp/parallel/zero.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "dist/store_test_util.h"
#if DDP_HAVE_GLOO
#include "ddp/dist/process_group_gloo.h"
#endif

using namespace ddp;
using namespace ddp::parallel;

namespace {

#if DDP_HAVE_GLOO

void on_every_rank(int size, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

// Gloo ranks as threads over one TCPStore: the all-gathers complete on
// gloo's own threads, so a step really returns with them in flight.
std::vector<std::shared_ptr<dist::ProcessGroup>> gloo(int world) {
  auto server =
      std::make_shared<dist::TCPStore>(dist::test::server_options(std::chrono::seconds(30)));
  std::vector<std::shared_ptr<dist::ProcessGroup>> out(static_cast<size_t>(world));
  on_every_rank(world, [&](int rank) {
    std::shared_ptr<dist::Store> store = server;
    if (rank > 0)
      store = std::make_shared<dist::TCPStore>(
          dist::test::client_options(server->port(), std::chrono::seconds(30)));
    out[size_t(rank)] = dist::ProcessGroupGloo::create(store, rank, world);
  });
  return out;
}

// Four linear layers of odd sizes (no bucket divides by 2 or 3 ranks).
std::shared_ptr<nn::Sequential> make_mlp() {
  // The default generator is global: thread ranks take turns.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  manual_seed(23);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(7, 11),
      std::make_shared<nn::Functional>([](const Tensor& x) { return tanh(x); }, "Tanh"),
      std::make_shared<nn::Linear>(11, 13),
      std::make_shared<nn::Functional>([](const Tensor& x) { return tanh(x); }, "Tanh"),
      std::make_shared<nn::Linear>(13, 5), std::make_shared<nn::Linear>(5, 3)});
  m->to(DType::f64);
  return m;
}

constexpr double kMiB = 1024.0 * 1024.0;

// Buckets of about 100 f64 elements: five buckets, most holding several
// parameters, some a parameter of two layers' worth.
DDPOptions zero_options() {
  DDPOptions o;
  o.bucket_cap_mb = 800 / kMiB;
  o.rebuild_buckets = false;
  o.broadcast_buffers = false;
  return o;
}

Tensor batch(int rank, int step, int micro = 0) {
  Generator g(uint64_t(2000 + 97 * rank + 13 * step + micro));
  return randn({5, 7}, TensorOptions(DType::f64), &g);
}

using Values = std::vector<std::vector<double>>;
Values values(const Tensors& ts) {
  Values out;
  for (const Tensor& t : ts) out.push_back(t.to_vector<double>());
  return out;
}
Values values(const TensorDict& d) {
  Values out;
  for (const auto& [k, t] : d) out.push_back(t.to(DType::f64).to_vector<double>());
  return out;
}

enum class Engine { kPlain, kZero, kZeroOverlap };
enum class Opt { kSgd, kAdamW };

struct Recipe {
  Opt opt = Opt::kSgd;
  int steps = 5;
  int micro = 1;          // micro-batches per step; all but the last under no_sync
  double clip = 0;        // > 0: clip to this global norm
  bool grad_scaler = false;
  int inf_step = -1;      // that step's gradient gets an inf in one shard: a skip
  int checkpoint_step = 2;  // after this step: the state dicts and the parameters
  bool double_step = false;  // step twice (two recorded backwards) before a forward
};

struct Run {
  std::vector<Values> params;  // after each step (even steps: read after synchronizing)
  Values final_params, sharded, state;
  Values ckpt_params, ckpt_sharded, ckpt_state;
  std::vector<std::vector<size_t>> gather_orders;  // per step
  bool pending_after_step = false;  // some all-gather was still in flight after step()
};

Run train(std::shared_ptr<dist::ProcessGroup> group, const Recipe& r, Engine engine) {
  auto model = make_mlp();
  DistributedDataParallel<nn::Sequential> ddp(model, group, zero_options());
  std::unique_ptr<optim::Optimizer> plain;
  std::unique_ptr<ZeroRedundancyOptimizer> zero;
  const optim::SGDOptions sgd{.momentum = 0.9, .weight_decay = 1e-3};
  const optim::AdamWOptions adamw{.weight_decay = 0.05};
  if (engine == Engine::kPlain) {
    if (r.opt == Opt::kSgd)
      plain = std::make_unique<optim::SGD>(model->parameters(), 0.1, sgd);
    else
      plain = std::make_unique<optim::AdamW>(model->parameters(), 0.01, adamw);
  } else {
    zero = std::make_unique<ZeroRedundancyOptimizer>(
        ddp, r.opt == Opt::kSgd ? zero_sgd(0.1, sgd) : zero_adamw(0.01, adamw),
        ZeroOptions{.overlap_with_forward = engine == Engine::kZeroOverlap});
  }
  optim::Optimizer& opt = plain ? *plain : static_cast<optim::Optimizer&>(*zero);
  optim::StepLR sched(opt, 1, 0.7);
  amp::GradScaler scaler({.init_scale = 1024.0, .enabled = r.grad_scaler});
  auto sync = [&] {
    if (zero) zero->synchronize_parameters();
  };
  Run run;
  auto backward = [&](int step) {
    for (int m = 0; m < r.micro; ++m) {
      auto body = [&] {
        Tensor y = ddp(batch(group->rank(), step, m));
        Tensor loss = sum(mul(y, y));
        (r.grad_scaler ? scaler.scale(loss) : loss).backward();
      };
      if (m + 1 < r.micro) {
        auto guard = ddp.no_sync();
        body();
      } else {
        body();
      }
    }
  };
  for (int step = 0; step < r.steps; ++step) {
    backward(step);
    if (step == r.inf_step) {
      // An inf in element 0 of the first parameter: plain DDP sees it on
      // every rank, ZeRO-1 only on the rank whose shard holds it.
      NoGradGuard no_grad;
      if (plain) {
        model->parameters()[0].grad().view({-1}).narrow(0, 0, 1).fill_(INFINITY);
      } else {
        for (size_t k = 0; k < zero->segments().size(); ++k)
          if (zero->segments()[k].param == 0 && zero->segments()[k].offset == 0)
            opt.param_groups()[0].params[k].grad().narrow(0, 0, 1).fill_(INFINITY);
      }
    }
    if (r.grad_scaler) scaler.unscale_(opt);
    if (r.clip > 0) {
      if (plain)
        optim::clip_grad_norm_(model->parameters(), r.clip);
      else
        zero->clip_grad_norm_(r.clip);
    }
    if (r.grad_scaler) {
      const bool stepped = scaler.step(opt);
      EXPECT_EQ(stepped, step != r.inf_step) << "step " << step;
      scaler.update();
    } else {
      opt.step();
    }
    if (r.double_step && step == 1) opt.step();  // the same gradients, twice, no forward between
    sched.step();
    opt.zero_grad();
    if (zero) {
      run.gather_orders.push_back(zero->last_gather_order());
      run.pending_after_step = run.pending_after_step || !zero->pending_gathers().empty();
    }
    // Odd steps leave the all-gathers to the next forward's layers.
    if (step % 2 == 0) {
      sync();
      run.params.push_back(values(model->parameters()));
    }
    if (step == r.checkpoint_step) {
      sync();
      run.ckpt_params = values(model->parameters());
      run.ckpt_state = values(opt.state_dict());
      if (zero) run.ckpt_sharded = values(zero->sharded_state_dict());
    }
  }
  sync();
  run.final_params = values(model->parameters());
  run.state = values(opt.state_dict());
  if (zero) run.sharded = values(zero->sharded_state_dict());
  return run;
}

std::vector<Run> run_all(int world, const Recipe& r, Engine engine) {
  auto groups = gloo(world);
  std::vector<Run> runs(static_cast<size_t>(world));
  std::mutex mu;
  std::vector<std::string> errors;
  on_every_rank(world, [&](int rank) {
    try {
      runs[size_t(rank)] = train(groups[size_t(rank)], r, engine);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu);
      errors.push_back(fmt::format("rank {}: {}", rank, e.what()));
    }
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
  return runs;
}

double max_abs_diff(const Values& a, const Values& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t t = 0; t < a.size() && t < b.size(); ++t) {
    EXPECT_EQ(a[t].size(), b[t].size());
    for (size_t e = 0; e < a[t].size() && e < b[t].size(); ++e)
      worst = std::max(worst, std::abs(a[t][e] - b[t][e]));
  }
  return worst;
}

// The overlapped ZeRO-1 against the plain one, bit for bit on every rank;
// against plain DDP (plain_tolerance >= 0) within that tolerance.
void expect_same_as_zero(int world, const Recipe& r, double plain_tolerance = -1) {
  const std::vector<Run> base = run_all(world, r, Engine::kZero);
  const std::vector<Run> over = run_all(world, r, Engine::kZeroOverlap);
  ASSERT_EQ(base.size(), over.size());
  for (size_t k = 0; k < base.size(); ++k) {
    SCOPED_TRACE(fmt::format("rank {} of {}", k, world));
    ASSERT_EQ(base[k].params.size(), over[k].params.size());
    for (size_t s = 0; s < base[k].params.size(); ++s)
      EXPECT_EQ(base[k].params[s], over[k].params[s]) << "recorded step " << 2 * s;
    EXPECT_EQ(base[k].final_params, over[k].final_params);
    EXPECT_EQ(base[k].state, over[k].state);
    EXPECT_EQ(base[k].sharded, over[k].sharded);
    EXPECT_EQ(base[k].ckpt_params, over[k].ckpt_params);
    EXPECT_EQ(base[k].ckpt_state, over[k].ckpt_state);
    EXPECT_EQ(base[k].ckpt_sharded, over[k].ckpt_sharded);
    EXPECT_FALSE(over[k].ckpt_sharded.empty());
    EXPECT_EQ(over[k].final_params, over[0].final_params) << "differs from rank 0";
    // Every rank issued the all-gathers in the same order: first layers
    // (the last bucket) first; without the option in bucket order.
    EXPECT_EQ(over[k].gather_orders, over[0].gather_orders);
    EXPECT_TRUE(over[k].pending_after_step);
    for (size_t s = 0; s < over[k].gather_orders.size(); ++s) {
      const auto& order = over[k].gather_orders[s];
      if (order.empty()) continue;  // a skipped step
      for (size_t j = 0; j < order.size(); ++j) {
        EXPECT_EQ(order[j], order.size() - 1 - j) << "step " << s;
        EXPECT_EQ(base[k].gather_orders[s][j], j) << "step " << s;
      }
    }
  }
  if (plain_tolerance < 0) return;
  const std::vector<Run> plain = run_all(world, r, Engine::kPlain);
  for (size_t k = 0; k < plain.size(); ++k) {
    SCOPED_TRACE(fmt::format("plain DDP, rank {} of {}", k, world));
    ASSERT_EQ(plain[k].params.size(), over[k].params.size());
    for (size_t s = 0; s < plain[k].params.size(); ++s)
      EXPECT_LE(max_abs_diff(plain[k].params[s], over[k].params[s]), plain_tolerance)
          << "recorded step " << 2 * s;
    EXPECT_LE(max_abs_diff(plain[k].final_params, over[k].final_params), plain_tolerance);
  }
}

TEST(ZeroOverlap, GlooTwoRanksSgdWithSchedulerEqualsZeroAndPlainDdp) {
  expect_same_as_zero(2, Recipe{}, /*plain_tolerance=*/0.0);
}

TEST(ZeroOverlap, GlooThreeRanksAdamWEqualsZero) {
  expect_same_as_zero(3, Recipe{.opt = Opt::kAdamW, .steps = 4}, /*plain_tolerance=*/1e-12);
}

TEST(ZeroOverlap, NoSyncAccumulationEqualsZero) {
  expect_same_as_zero(2, Recipe{.opt = Opt::kAdamW, .micro = 3}, 0.0);
  expect_same_as_zero(3, Recipe{.steps = 4, .micro = 2});
}

// ZeRO-1's global norm adds the shards' partial sums (Note [ZeRO-1 with
// GradScaler and clipping]), an order of its own, so with clipping it
// differs from plain DDP in the last bits, with the option as without it.
TEST(ZeroOverlap, ClippingThroughTheGlobalNormEqualsZero) {
  expect_same_as_zero(2, Recipe{.opt = Opt::kAdamW, .clip = 0.05}, 1e-12);
  expect_same_as_zero(3, Recipe{.clip = 0.5});
}

TEST(ZeroOverlap, GradScalerSkipDecidedByOneShardEqualsZero) {
  // Five steps: an odd step after the skip leaves its all-gathers to the
  // next forward's layers.
  expect_same_as_zero(2, Recipe{.steps = 5, .clip = 0.5, .grad_scaler = true, .inf_step = 1},
                      1e-12);
  expect_same_as_zero(3, Recipe{.opt = Opt::kAdamW, .steps = 5, .grad_scaler = true,
                                .inf_step = 2});
}

TEST(ZeroOverlap, TwoStepsBeforeAForwardEqualZero) {
  expect_same_as_zero(2, Recipe{.steps = 4, .double_step = true});
}

// Each layer waits for the all-gathers of its own buckets only: when the
// first layer runs, the buckets of the later layers are still pending;
// at the end of the forward none is. Without the option the forward
// waits for all of them before its first layer.
TEST(ZeroOverlap, EachLayerWaitsOnlyForItsOwnBuckets) {
  auto groups = gloo(2);
  std::mutex mu;
  std::vector<std::string> errors;
  on_every_rank(2, [&](int rank) {
    try {
      for (bool overlap : {false, true}) {
        SCOPED_TRACE(fmt::format("rank {}, overlap {}", rank, overlap));
        auto model = make_mlp();
        DistributedDataParallel<nn::Sequential> ddp(model, groups[size_t(rank)], zero_options());
        ZeroRedundancyOptimizer opt(ddp, zero_sgd(0.1, {.momentum = 0.9}),
                                    {.overlap_with_forward = overlap});
        EXPECT_EQ(opt.options().overlap_with_forward, overlap);
        const auto assignment = ddp.reducer().bucket_assignment();
        ASSERT_GE(assignment.size(), 3u);
        // The buckets of the first layer's weight and bias (parameters 0, 1).
        std::vector<size_t> first_layer;
        for (size_t b = 0; b < assignment.size(); ++b)
          for (size_t i : assignment[b])
            if (i <= 1 && (first_layer.empty() || first_layer.back() != b))
              first_layer.push_back(b);
        std::vector<size_t> pending_at_first_layer;
        auto& layer0 = *model->children().front();
        // Registered after ZeRO's hook: it sees what that one left.
        auto handle = layer0.register_forward_pre_hook(
            [&](nn::Module&, Tensors&) { pending_at_first_layer = opt.pending_gathers(); });
        for (int step = 0; step < 3; ++step) {
          Tensor y = ddp(batch(rank, step));
          EXPECT_TRUE(opt.pending_gathers().empty()) << "after the forward of step " << step;
          sum(mul(y, y)).backward();
          opt.step();
          opt.zero_grad();
          EXPECT_EQ(opt.pending_gathers().size(), assignment.size());
        }
        ddp(batch(rank, 3));
        handle.remove();
        if (!overlap) {
          EXPECT_TRUE(pending_at_first_layer.empty());
        } else {
          ASSERT_FALSE(pending_at_first_layer.empty());
          for (size_t b : pending_at_first_layer)
            for (size_t f : first_layer) EXPECT_NE(b, f) << "the first layer's bucket is pending";
          EXPECT_EQ(pending_at_first_layer.size() + first_layer.size(), assignment.size());
        }
        EXPECT_TRUE(opt.pending_gathers().empty());
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu);
      errors.push_back(fmt::format("rank {}: {}", rank, e.what()));
    }
  });
  ASSERT_TRUE(errors.empty()) << errors.front();
}

// An optimizer destroyed between step() and the next forward lands its
// all-gathers: the parameters are those synchronize_parameters() gives.
TEST(ZeroOverlap, DestroyingTheOptimizerLandsItsAllGathers) {
  auto groups = gloo(2);
  std::mutex mu;
  std::vector<std::string> errors;
  on_every_rank(2, [&](int rank) {
    try {
      std::vector<Values> got;
      for (bool overlap : {false, true}) {
        auto model = make_mlp();
        DistributedDataParallel<nn::Sequential> ddp(model, groups[size_t(rank)], zero_options());
        auto opt = std::make_unique<ZeroRedundancyOptimizer>(
            ddp, zero_adamw(0.01), ZeroOptions{.overlap_with_forward = overlap});
        for (int step = 0; step < 2; ++step) {
          Tensor y = ddp(batch(rank, step));
          sum(mul(y, y)).backward();
          opt->step();
          opt->zero_grad();
        }
        if (overlap) {
          EXPECT_FALSE(opt->pending_gathers().empty());
          opt.reset();
        } else {
          opt->synchronize_parameters();
        }
        got.push_back(values(model->parameters()));
        ddp(batch(rank, 2));  // the DDP's own hooks outlive the optimizer harmlessly
      }
      EXPECT_EQ(got[0], got[1]) << "rank " << rank;
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu);
      errors.push_back(fmt::format("rank {}: {}", rank, e.what()));
    }
  });
  ASSERT_TRUE(errors.empty()) << errors.front();
}

// A world of one: no collective; the option changes nothing.
TEST(ZeroOverlap, WorldOfOneEqualsThePlainOptimizer) {
  auto group = gloo(1).front();
  auto ref = make_mlp();
  auto mine = make_mlp();
  DistributedDataParallel<nn::Sequential> ref_ddp(ref, group, zero_options());
  DistributedDataParallel<nn::Sequential> zero_ddp(mine, group, zero_options());
  optim::AdamW opt_ref(ref->parameters(), 0.01);
  ZeroRedundancyOptimizer opt(zero_ddp, zero_adamw(0.01), {.overlap_with_forward = true});
  for (int s = 0; s < 3; ++s) {
    for (auto* m : {&ref_ddp, &zero_ddp}) {
      Tensor y = (*m)(batch(0, s));
      sum(mul(y, y)).backward();
    }
    opt_ref.step();
    opt.step();
    EXPECT_TRUE(opt.pending_gathers().empty());
    opt_ref.zero_grad();
    opt.zero_grad();
  }
  opt.synchronize_parameters();
  EXPECT_EQ(values(mine->parameters()), values(ref->parameters()));
}

void expect_value_error(const std::function<void()>& fn, const std::string& words) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << words << "'";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(ZeroOverlap, BadCombinationsRaiseValueError) {
  auto group = gloo(1).front();
  auto model = make_mlp();
  const ZeroOptions on{.overlap_with_forward = true};
  {
    DDPOptions o = zero_options();
    o.fault_tolerant = true;
    DistributedDataParallel<nn::Sequential> ddp(model, group, o);
    expect_value_error([&] { ZeroRedundancyOptimizer(ddp, zero_sgd(0.1), on); }, "fault_tolerant");
  }
  {
    DistributedDataParallel<nn::Sequential> ddp(model, group, zero_options());
    optim::SGD plain(model->parameters(), 0.1);
    ddp.overlap_step(plain);
    expect_value_error([&] { ZeroRedundancyOptimizer(ddp, zero_sgd(0.1), on); },
                       "ZeroOptions::overlap_with_forward instead");
  }
  {
    DistributedDataParallel<nn::Sequential> ddp(model, group, zero_options());
    ZeroRedundancyOptimizer opt(ddp, zero_sgd(0.1), on);
    optim::SGD plain(model->parameters(), 0.1);
    expect_value_error([&] { ddp.overlap_step(plain); }, "ZeroOptions::overlap_with_forward");
    expect_value_error([&] { Join join({&ddp}); }, "ZeroRedundancyOptimizer");
  }
  {
    // The rest of ZeRO-1's requirements hold with the option too.
    DistributedDataParallel<nn::Sequential> ddp(model, group, DDPOptions{});
    expect_value_error([&] { ZeroRedundancyOptimizer(ddp, zero_sgd(0.1), on); },
                       "rebuild_buckets = false");
  }
}

#endif  // DDP_HAVE_GLOO

}  // namespace
