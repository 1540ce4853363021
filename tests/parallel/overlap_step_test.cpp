// DistributedDataParallel::overlap_step (Note [Overlapped step] in
// reducer.h, Note [Deferred optimizer steps] in optimizer.h): f64
// trajectories equal plain DDP's bit for bit — SGD with momentum and a
// scheduler, AdamW, no_sync accumulation, find_unused_parameters,
// static_graph, clipping, a GradScaler skip, a checkpoint between steps —
// over gloo ranks (real asynchronous buckets) and thread ranks; the launch
// order with priority buckets and with chunks (Note [Overlap chunks]); the
// tuner's overlapped schedule under auto_bucket_size, on every rank and
// through a checkpoint (Note [Overlapped step model]); a failed bucket; the
// bad inputs.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ddp/amp/grad_scaler.h"
#include "ddp/config.h"
#include "ddp/dist/process_group_gloo.h"
#include "ddp/nn/container.h"
#include "ddp/nn/linear.h"
#include "ddp/optim/adamw.h"
#include "ddp/optim/clip_grad.h"
#include "ddp/optim/lr_scheduler.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/join.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "dist/store_test_util.h"
#include "parallel/thread_group.h"
#include "parallel/world_of_one.h"

using namespace ddp;
using namespace ddp::parallel;
using ddp::test::on_every_rank;
using ddp::test::thread_groups;

namespace {

// Four layers, each parameter in a bucket of its own (bucket_cap_mb tiny),
// so that eight buckets finish and step one at a time.
std::shared_ptr<nn::Sequential> make_mlp() {
  // The default generator is global: ranks that are threads take turns, so
  // every model (and rank 0's, which DDP broadcasts) starts the same.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  manual_seed(21);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(6, 12),
      std::make_shared<nn::Functional>([](const Tensor& x) { return tanh(x); }, "Tanh"),
      std::make_shared<nn::Linear>(12, 12),
      std::make_shared<nn::Functional>([](const Tensor& x) { return tanh(x); }, "Tanh"),
      std::make_shared<nn::Linear>(12, 8), std::make_shared<nn::Linear>(8, 3)});
  m->to(DType::f64);
  return m;
}

Tensor batch(int rank, int step, int micro = 0) {
  Generator g(uint64_t(1000 + 97 * rank + 13 * step + micro));
  return randn({5, 6}, TensorOptions(DType::f64), &g);
}

std::vector<std::vector<double>> values(const Tensors& ts) {
  std::vector<std::vector<double>> out;
  for (const Tensor& t : ts) out.push_back(t.to_vector<double>());
  return out;
}

std::vector<std::vector<double>> values(const TensorDict& d) {
  std::vector<std::vector<double>> out;
  for (const auto& [k, t] : d) out.push_back(t.to_vector<double>());
  return out;
}

struct Run {
  std::vector<std::vector<std::vector<double>>> params_per_step;  // rank 0's, after each step
  std::vector<std::vector<double>> final_params, opt_state;
  bool pending_after_backward = false;  // a synchronised backward left buckets in flight
  std::vector<std::vector<ChunkLaunch>> chunk_launches;  // per step (Note [Overlap chunks])
  // After the last step: the reducer's schedule and buckets, and what the
  // tuner chose (auto_bucket_size; Note [Overlapped step model]).
  int priority_buckets = 0;
  OverlapChunks chunks;
  std::vector<std::vector<size_t>> buckets;
  bool tuned = false;
  std::optional<OverlapSchedule> tuned_schedule;
};

enum class Opt { kSgd, kAdamW };

struct Recipe {
  Opt opt = Opt::kSgd;
  int steps = 5;
  int micro = 1;              // micro-batches per step; all but the last under no_sync
  bool clip = false;          // clip_grad_norm_ to 0.5 (overlap: after synchronize_step)
  bool scheduler = true;      // StepLR(1, 0.7): every step has its own lr
  int nan_step = -1;          // rank 1's input is NaN at this step: a GradScaler skip
  bool grad_scaler = false;
  DDPOptions ddp = {.bucket_cap_mb = 1e-6, .broadcast_buffers = false};
};

// One rank's training loop, in the order a PyTorch user writes it.
Run train(std::shared_ptr<dist::ProcessGroup> group, const Recipe& r, bool overlap,
          int priority_buckets, OverlapChunks chunks = {}) {
  auto model = make_mlp();
  DistributedDataParallel<nn::Sequential> ddp(model, group, r.ddp);
  std::unique_ptr<optim::Optimizer> opt;
  if (r.opt == Opt::kSgd)
    opt = std::make_unique<optim::SGD>(model->parameters(), 0.1,
                                       optim::SGDOptions{.momentum = 0.9, .weight_decay = 1e-3});
  else
    opt = std::make_unique<optim::AdamW>(model->parameters(), 0.01);
  optim::StepLR sched(*opt, 1, 0.7);
  amp::GradScaler scaler({.init_scale = 1024.0, .enabled = r.grad_scaler});
  if (overlap) ddp.overlap_step(*opt, priority_buckets, chunks);
  Run run;
  for (int step = 0; step < r.steps; ++step) {
    for (int m = 0; m < r.micro; ++m) {
      Tensor x = batch(group->rank(), step, m);
      if (step == r.nan_step && group->rank() == 1) x = mul(x, Tensor::scalar(NAN, DType::f64));
      auto body = [&] {
        Tensor y = ddp(x);
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
    run.pending_after_backward = run.pending_after_backward || ddp.reducer().overlap_pending();
    run.chunk_launches.push_back(ddp.reducer().last_chunk_launches());
    if (r.clip) {
      ddp.synchronize_step();  // the gradients are read: they must be final
      optim::clip_grad_norm_(model->parameters(), 0.5);
    }
    if (r.grad_scaler) {
      scaler.step(*opt);
      scaler.update();
    } else {
      opt->step();
    }
    if (r.scheduler) sched.step();
    opt->zero_grad();
    if (group->rank() == 0) {
      ddp.synchronize_step();  // read the parameters: what the step gave them
      run.params_per_step.push_back(values(model->parameters()));
    }
  }
  run.opt_state = values(opt->state_dict());  // synchronises by itself
  run.final_params = values(model->parameters());
  run.priority_buckets = ddp.reducer().priority_buckets();
  run.chunks = ddp.reducer().overlap_chunks();
  run.buckets = ddp.reducer().bucket_assignment();
  if (const BucketAutoTuner* tuner = ddp.bucket_tuner()) {
    run.tuned = tuner->done();
    run.tuned_schedule = tuner->overlap_schedule();
  }
  return run;
}

// The same recipe on `make_groups()` ranks, plain and overlapped.
void expect_same_trajectory(const std::function<std::vector<std::shared_ptr<dist::ProcessGroup>>()>& make_groups,
                            const Recipe& recipe, int priority_buckets, bool expect_pending,
                            OverlapChunks chunks = {}, std::vector<Run>* overlapped = nullptr,
                            double tolerance = 0.0) {
  // Bit for bit, or (tolerance > 0) each value within tolerance of plain DDP's.
  auto expect_equal = [tolerance](const std::vector<std::vector<double>>& want,
                                  const std::vector<std::vector<double>>& got,
                                  const std::string& what) {
    if (tolerance == 0.0) {
      EXPECT_EQ(want, got) << what;
      return;
    }
    ASSERT_EQ(want.size(), got.size()) << what;
    double worst = 0;
    for (size_t t = 0; t < want.size(); ++t) {
      ASSERT_EQ(want[t].size(), got[t].size()) << what;
      for (size_t e = 0; e < want[t].size(); ++e)
        worst = std::max(worst, std::abs(want[t][e] - got[t][e]));
    }
    EXPECT_LE(worst, tolerance) << what;
  };
  std::vector<Run> plain, over;
  for (bool overlap : {false, true}) {
    auto groups = make_groups();
    std::vector<Run> runs(groups.size());
    std::mutex mu;
    std::vector<std::string> errors;
    on_every_rank(int(groups.size()), [&](int rank) {
      try {
        runs[size_t(rank)] = train(groups[size_t(rank)], recipe, overlap, priority_buckets, chunks);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lk(mu);
        errors.push_back(fmt::format("rank {}: {}", rank, e.what()));
      }
    });
    ASSERT_TRUE(errors.empty()) << errors.front();
    (overlap ? over : plain) = std::move(runs);
  }
  ASSERT_EQ(plain[0].params_per_step.size(), over[0].params_per_step.size());
  for (size_t s = 0; s < plain[0].params_per_step.size(); ++s)
    expect_equal(plain[0].params_per_step[s], over[0].params_per_step[s],
                 fmt::format("after step {}", s));
  for (size_t r = 0; r < plain.size(); ++r) {
    expect_equal(plain[r].final_params, over[r].final_params, fmt::format("rank {}", r));
    expect_equal(plain[r].opt_state, over[r].opt_state, fmt::format("rank {}", r));
    EXPECT_EQ(over[r].final_params, over[0].final_params) << "rank " << r << " differs from rank 0";
    EXPECT_FALSE(plain[r].pending_after_backward);
    if (expect_pending) EXPECT_TRUE(over[r].pending_after_backward) << "rank " << r;
    // Note [Overlap chunks]: every rank issued the same chunks in the same order.
    EXPECT_EQ(over[r].chunk_launches, over[0].chunk_launches) << "rank " << r;
  }
  if (overlapped) *overlapped = std::move(over);
}

std::vector<std::shared_ptr<dist::ProcessGroup>> threads2() {
  std::vector<std::shared_ptr<dist::ProcessGroup>> out;
  for (auto& g : thread_groups(2)) out.push_back(g);
  return out;
}

#if DDP_HAVE_GLOO
// Gloo ranks as threads over one TCPStore: collectives complete on gloo's
// own threads, so a backward really returns with buckets in flight.
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

TEST(OverlapStep, GlooSgdWithSchedulerEqualsPlainDdpBitForBit) {
  for (int priority : {1, 3, 100})
    expect_same_trajectory([] { return gloo(2); }, Recipe{}, priority, /*expect_pending=*/true);
}

TEST(OverlapStep, GlooThreeRanksAdamWEqualsPlainDdp) {
  expect_same_trajectory([] { return gloo(3); }, Recipe{.opt = Opt::kAdamW, .steps = 4}, 4, true);
}
#endif

#if DDP_HAVE_GLOO
// Note [Overlapped step model]: with auto_bucket_size the tuner measures,
// chooses buckets, priority buckets and chunks from the model, installs
// them alike on every rank, and the maths stays plain DDP's. Plain DDP's
// own tuner (plan_buckets) runs on the plain side.
TEST(OverlapTuner, AutoBucketSizeChoosesTheScheduleOnEveryRankAndKeepsTheMaths) {
  Recipe tuned{.steps = 6};
  tuned.ddp.auto_bucket_size = true;
  tuned.ddp.auto_bucket_iterations = 2;
  std::vector<::Run> over;
  expect_same_trajectory([] { return gloo(2); }, tuned, 1, /*expect_pending=*/true, {}, &over);
  for (size_t r = 0; r < over.size(); ++r) {
    SCOPED_TRACE(::testing::Message() << "rank " << r);
    EXPECT_TRUE(over[r].tuned);
    ASSERT_TRUE(over[r].tuned_schedule.has_value());
    const OverlapSchedule& s = *over[r].tuned_schedule;
    EXPECT_EQ(over[r].priority_buckets, s.priority_buckets);
    EXPECT_EQ(over[r].chunks.chunk_mb, s.chunks.chunk_mb);
    EXPECT_EQ(over[r].chunks.issue_ratio, s.chunks.issue_ratio);
    EXPECT_EQ(over[r].priority_buckets, over[0].priority_buckets);
    EXPECT_EQ(over[r].chunks.chunk_mb, over[0].chunks.chunk_mb);
    EXPECT_EQ(over[r].buckets, over[0].buckets);
    // The model's caps are MiB: this small model fits one bucket, no longer
    // the one bucket per parameter of bucket_cap_mb = 1e-6.
    EXPECT_LT(over[r].buckets.size(), 8u);
  }
}
#endif

// Note [Bucket plans in checkpoints]: the schedule the tuner chose travels
// with the bucket plan, and a resumed job installs it without tuning again;
// a bad schedule in the state is refused before anything changes.
TEST(OverlapTuner, TheChosenScheduleResumesFromTheBucketPlanState) {
  auto model = make_mlp();
  const DDPOptions tuned{.bucket_cap_mb = 1e-6, .broadcast_buffers = false,
                         .auto_bucket_size = true, .auto_bucket_iterations = 1};
  TensorDict state;
  OverlapSchedule chosen;
  {
    DistributedDataParallel<nn::Sequential> ddp(model, ddp::test::solo(), tuned);
    optim::SGD opt(model->parameters(), 0.1);
    ddp.overlap_step(opt, 1);
    for (int step = 0; step < 4; ++step) {
      sum(ddp(batch(0, step))).backward();
      opt.step();
      opt.zero_grad();
    }
    ddp.synchronize_step();
    ASSERT_TRUE(ddp.bucket_tuner()->done());
    ASSERT_TRUE(ddp.bucket_tuner()->overlap_schedule().has_value());
    chosen = *ddp.bucket_tuner()->overlap_schedule();
    state = ddp.bucket_plan_state();
    EXPECT_EQ(state.at("tuner.overlap.priority_buckets").item<double>(), chosen.priority_buckets);
    EXPECT_EQ(state.at("tuner.overlap.chunk_mb").item<double>(), chosen.chunks.chunk_mb);
    EXPECT_EQ(state.at("tuner.overlap.issue_ratio").item<double>(), chosen.chunks.issue_ratio);
  }
  DistributedDataParallel<nn::Sequential> resumed(model, ddp::test::solo(), tuned);
  optim::SGD opt(model->parameters(), 0.1);
  resumed.overlap_step(opt, 1, {.chunk_mb = 3, .issue_ratio = 0.5});  // to be replaced
  TensorDict bad = state;
  bad.set("tuner.overlap.priority_buckets", Tensor::scalar(0.0, DType::f64));
  EXPECT_THROW(resumed.load_bucket_plan_state(bad), ValueError);
  bad = state;
  bad.set("tuner.overlap.issue_ratio", Tensor::scalar(1.5, DType::f64));
  EXPECT_THROW(resumed.load_bucket_plan_state(bad), ValueError);
  EXPECT_FALSE(resumed.bucket_tuner()->done());  // nothing changed
  EXPECT_EQ(resumed.reducer().overlap_chunks().chunk_mb, 3.0);
  resumed.load_bucket_plan_state(state);
  EXPECT_TRUE(resumed.bucket_tuner()->done());
  EXPECT_EQ(resumed.reducer().priority_buckets(), chosen.priority_buckets);
  EXPECT_EQ(resumed.reducer().overlap_chunks().chunk_mb, chosen.chunks.chunk_mb);
  EXPECT_EQ(resumed.reducer().overlap_chunks().issue_ratio, chosen.chunks.issue_ratio);
  // Without the schedule's keys (an older checkpoint) the plan still loads.
  DistributedDataParallel<nn::Sequential> older(model, ddp::test::solo(), tuned);
  TensorDict old_state = state;
  old_state.erase("tuner.overlap.priority_buckets");
  old_state.erase("tuner.overlap.chunk_mb");
  old_state.erase("tuner.overlap.issue_ratio");
  older.load_bucket_plan_state(old_state);
  EXPECT_TRUE(older.bucket_tuner()->done());
  EXPECT_FALSE(older.bucket_tuner()->overlap_schedule().has_value());
}

TEST(OverlapStep, NoSyncAccumulationAndAdamWEqualPlainDdp) {
  expect_same_trajectory(threads2, Recipe{.opt = Opt::kAdamW, .micro = 3}, 3, true);
}

TEST(OverlapStep, ClippingAfterSynchronizeStepEqualsPlainDdp) {
  expect_same_trajectory(threads2, Recipe{.clip = true}, 2, true);
}

TEST(OverlapStep, GradScalerSkipEqualsPlainDdp) {
  // Step 2's gradients are NaN everywhere after the average: both skip it.
  expect_same_trajectory(threads2, Recipe{.steps = 4, .nan_step = 2, .grad_scaler = true}, 2, true);
}

TEST(OverlapStep, FindUnusedParametersEqualsPlainDdp) {
  Recipe unused;
  unused.ddp.find_unused_parameters = true;  // the flags allreduce: synchronous backwards
  expect_same_trajectory(threads2, unused, 3, /*expect_pending=*/false);
}

TEST(OverlapStep, StaticGraphEqualsPlainDdp) {
  Recipe stat;
  stat.ddp.static_graph = true;  // synchronous at the first backward only
  expect_same_trajectory(threads2, stat, 3, /*expect_pending=*/true);
}

TEST(OverlapStep, GradientCopiesEqualPlainDdp) {
  Recipe view_off;
  view_off.ddp.gradient_as_bucket_view = false;
  expect_same_trajectory(threads2, view_off, 3, true);
}

// Note [Join] with uneven inputs: rank 1 runs out after one step and
// shadows; its last step, recorded before it joined, must be applied before
// the final broadcast, as plain DDP applied it at once.
TEST(OverlapStep, JoinWithUnevenInputsEqualsPlainDdp) {
  // Whole buckets and chunks: inside a Join scope the step is not overlapped
  // (synchronous whole buckets); the chunk settings come back after it.
  const OverlapChunks chunked{.chunk_mb = 56 / (1024.0 * 1024.0), .issue_ratio = 0.5};
  for (OverlapChunks chunks : {OverlapChunks{}, chunked}) {
    const std::vector<int> batches = {3, 1};
    std::vector<std::vector<std::vector<double>>> params(2), states(2);
    for (bool overlap : {false, true}) {
      auto groups = thread_groups(2);
      on_every_rank(2, [&](int rank) {
        auto model = make_mlp();
        DistributedDataParallel<nn::Sequential> ddp(
            model, groups[size_t(rank)], {.bucket_cap_mb = 1e-6, .broadcast_buffers = false});
        optim::SGD opt(model->parameters(), 0.1, {.momentum = 0.9});
        if (overlap) ddp.overlap_step(opt, 3, chunks);
        Join join({&ddp});
        join.run([&] {
          for (int step = 0; step < batches[size_t(rank)]; ++step) {
            opt.zero_grad(false);
            Tensor y = ddp(batch(rank, step));
            sum(mul(y, y)).backward();
            opt.step();
          }
        });
        if (overlap) EXPECT_EQ(ddp.reducer().overlap_chunks().chunk_mb, chunks.chunk_mb);
        auto p = values(model->parameters());
        auto st = values(opt.state_dict());
        if (overlap) {
          EXPECT_EQ(p, params[size_t(rank)]) << "rank " << rank << ": parameters";
          EXPECT_EQ(st, states[size_t(rank)]) << "rank " << rank << ": optimizer state";
        } else {
          params[size_t(rank)] = p;
          states[size_t(rank)] = st;
        }
      });
    }
    EXPECT_EQ(params[0], params[1]);
  }
}

// Eight buckets (one per parameter, in reverse registration order); with
// three priority buckets the last three of backward go out at its end in
// reverse order: the first layer's weight and bias first.
TEST(OverlapStep, PriorityBucketsLaunchFirstLayersFirst) {
  auto group = std::make_shared<ddp::test::WorldOfOne>();
  auto model = make_mlp();
  DistributedDataParallel<nn::Sequential> ddp(model, group,
                                              {.bucket_cap_mb = 1e-6, .broadcast_buffers = false,
                                               .rebuild_buckets = false});
  optim::SGD opt(model->parameters(), 0.1);
  ddp.overlap_step(opt, 3);
  sum(ddp(batch(0, 0))).backward();
  // Parameters by size: fc0 w 72 b 12, fc1 w 144 b 12, fc2 w 96 b 8, fc3 w 24 b 3.
  const std::vector<int64_t> plain_order = {3, 24, 8, 96, 12, 144, 12, 72};
  const std::vector<int64_t> overlapped = {3, 24, 8, 96, 12, 72, 12, 144};
  EXPECT_EQ(group->allreduce_sizes, overlapped);
  EXPECT_NE(group->allreduce_sizes, plain_order);
  opt.step();
  opt.zero_grad();
  ddp.synchronize_step();
}

// A ProcessGroup of one whose n-th allreduce fails (asynchronously: the
// error is in the Work).
class FailingGroup : public ddp::test::WorldOfOne {
 public:
  explicit FailingGroup(int fail_at) : fail_at_(fail_at) {}

 protected:
  dist::WorkPtr do_allreduce(Tensors& t, dist::ReduceOp op) override {
    if (calls_++ != fail_at_) return WorldOfOne::do_allreduce(t, op);
    auto work = std::make_shared<dist::Work>("allreduce");
    work->mark_completed(std::make_exception_ptr(DistNetworkError("peer lost (test)")));
    return work;
  }

 private:
  int fail_at_, calls_ = 0;
};

TEST(OverlapStep, AFailedBucketIsRaisedByTheNextForwardWithEveryGradCleared) {
  auto group = std::make_shared<FailingGroup>(/*fail_at=*/10);  // bucket 2 of the second backward
  auto model = make_mlp();
  DistributedDataParallel<nn::Sequential> ddp(model, group,
                                              {.bucket_cap_mb = 1e-6, .broadcast_buffers = false,
                                               .rebuild_buckets = false});
  optim::SGD opt(model->parameters(), 0.1);
  ddp.overlap_step(opt, 1);
  sum(ddp(batch(0, 0))).backward();
  opt.step();
  opt.zero_grad();
  sum(ddp(batch(0, 1))).backward();  // returns: the failure is in flight
  EXPECT_TRUE(ddp.reducer().overlap_pending());
  opt.step();
  try {
    ddp(batch(0, 2));
    ADD_FAILURE() << "the failed bucket was not raised";
  } catch (const DistNetworkError& e) {
    EXPECT_NE(std::string(e.what()).find("peer lost (test)"), std::string::npos) << e.what();
  }
  for (const Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  // The job can go on (the next iteration is a fresh one).
  sum(ddp(batch(0, 3))).backward();
  opt.step();
  ddp.synchronize_step();
}

TEST(OverlapStep, BadInputsRaiseValueErrorAndChangeNothing) {
  auto model = make_mlp();
  auto make = [&](DDPOptions o = {}) {
    return std::make_unique<DistributedDataParallel<nn::Sequential>>(model, ddp::test::solo(), o);
  };
  optim::SGD opt(model->parameters(), 0.1);
  {
    auto ddp = make();
    EXPECT_THROW(ddp->overlap_step(opt, 0), ValueError);
    EXPECT_FALSE(ddp->overlaps_step());
    EXPECT_FALSE(opt.has_deferral());
    ddp->overlap_step(opt);
    EXPECT_THROW(ddp->overlap_step(opt), ValueError);  // twice
    EXPECT_THROW(ddp->register_comm_hook(allreduce_hook), ValueError);
    EXPECT_THROW(ddp->reset_group(ddp::test::solo()), ValueError);
    auto other = make();
    EXPECT_THROW(other->overlap_step(opt), ValueError);  // deferred by the first already
  }
  EXPECT_FALSE(opt.has_deferral());  // released with its DDP
  {
    auto ddp = make();
    ddp->register_comm_hook(allreduce_hook);
    EXPECT_THROW(ddp->overlap_step(opt), ValueError);
  }
  // auto_bucket_size is taken: the tuner plans the overlapped schedule too
  // (OverlapTuner below).
  EXPECT_NO_THROW(make({.auto_bucket_size = true})->overlap_step(opt));
  EXPECT_FALSE(opt.has_deferral());  // released with its DDP
  EXPECT_THROW(make({.fault_tolerant = true})->overlap_step(opt), ValueError);
  {
    auto stranger = std::make_shared<nn::Linear>(2, 2);
    optim::SGD mixed({model->parameters()[0], stranger->weight}, 0.1);
    auto ddp = make();
    try {
      ddp->overlap_step(mixed);
      ADD_FAILURE() << "a parameter outside the module was accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("not a trainable parameter of the wrapped module"),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(mixed.has_deferral());
  }
  // An optimizer destroyed before its DDP: the DDP lets go of it.
  {
    auto ddp = make();
    auto short_lived = std::make_unique<optim::SGD>(model->parameters(), 0.1);
    ddp->overlap_step(*short_lived);
    short_lived.reset();
  }
}

// ---- Note [Overlap chunks] ---------------------------------------------------

constexpr double kMiB = 1024.0 * 1024.0;
using Runs = std::vector<Run>;  // (a TEST's body sees testing::Test::Run first)

// The shape every chunked backward's launches must have: the chunks issued
// during backward in bucket order, none of a held-back bucket (from
// first_held on); then, at its end, every other chunk, the last bucket (the
// first layers) first; each bucket's chunks once, in order, tiling its
// buffer. Returns how many chunks of the backlog (buckets below
// first_held) went out at the end, overtaken by the first layers'.
size_t expect_chunk_order(const std::vector<ChunkLaunch>& launches, int first_held) {
  std::map<int, std::vector<ChunkLaunch>> by_bucket;
  size_t backlog_at_end = 0;
  for (size_t k = 0; k < launches.size(); ++k) {
    const ChunkLaunch& c = launches[k];
    by_bucket[c.bucket].push_back(c);
    if (c.at_end && c.bucket < first_held) ++backlog_at_end;
    if (!c.at_end) EXPECT_LT(c.bucket, first_held) << "launch " << k << ": held back in backward";
    if (k == 0) continue;
    const ChunkLaunch& p = launches[k - 1];
    EXPECT_FALSE(p.at_end && !c.at_end) << "launch " << k << ": during backward after its end";
    if (!c.at_end) {
      EXPECT_LT(std::pair(p.bucket, p.chunk), std::pair(c.bucket, c.chunk)) << "launch " << k;
    } else if (p.at_end) {
      EXPECT_TRUE(c.bucket < p.bucket || (c.bucket == p.bucket && c.chunk == p.chunk + 1))
          << "launch " << k << ": bucket " << c.bucket << " chunk " << c.chunk << " after bucket "
          << p.bucket << " chunk " << p.chunk;
    }
  }
  for (const auto& [b, chunks] : by_bucket) {
    int64_t offset = 0;
    for (size_t j = 0; j < chunks.size(); ++j) {
      EXPECT_EQ(chunks[j].chunk, int(j)) << "bucket " << b;
      EXPECT_EQ(chunks[j].offset, offset) << "bucket " << b;
      EXPECT_GT(chunks[j].numel, 0) << "bucket " << b;
      offset += chunks[j].numel;
    }
  }
  return backlog_at_end;
}

// Three buckets of 131, 156 and 84 f64 elements (caps of 100 elements).
Recipe three_buckets(Recipe r = {}) {
  r.ddp.bucket_cap_mb = 800 / kMiB;  // the first bucket's cap too (the smaller of the two)
  return r;
}

#if DDP_HAVE_GLOO
TEST(OverlapChunks, GlooTwoRanksEqualPlainDdpBitForBitAndIssueAlike) {
  // Chunks of 7 elements (dividing only the third bucket), 8, one element,
  // and 1 MiB (larger than any bucket); every byte at once, half, 0.3; one
  // or two buckets held back, in turn.
  int turn = 0;
  for (double chunk : {56 / kMiB, 64 / kMiB, 8 / kMiB, 1.0})
    for (double ratio : {1.0, 0.5, 0.3}) {
      const int priority = 1 + turn++ % 2;
      SCOPED_TRACE(fmt::format("chunk {} B, ratio {}, priority {}", chunk * kMiB, ratio,
                               priority));
      Runs over;
      expect_same_trajectory([] { return gloo(2); }, three_buckets(), priority, true,
                             {.chunk_mb = chunk, .issue_ratio = ratio}, &over);
      ASSERT_FALSE(over.empty());
      for (const auto& launches : over[0].chunk_launches) {
        ASSERT_FALSE(launches.empty());
        const size_t overtaken = expect_chunk_order(launches, 3 - priority);
        // Below 1, a backlog is left at the end, behind the first layers.
        if (ratio < 1) EXPECT_GT(overtaken, 0u);
      }
    }
}

// Gloo's ring allreduce adds an element's three values in an order that
// depends on where the element lies in the message, so a chunk that is not
// the whole bucket may round differently in the last bits (as another
// bucket size would): chunks as large as the buckets (the same messages,
// only issued in another order) are plain DDP's bit for bit; 7-element
// chunks within 1e-12 (the ranks still agree bit for bit with each other).
TEST(OverlapChunks, GlooThreeRanksEqualPlainDdp) {
  const Recipe adamw = three_buckets(Recipe{.opt = Opt::kAdamW, .steps = 4});
  expect_same_trajectory([] { return gloo(3); }, adamw, 2, true,
                         {.chunk_mb = 1.0, .issue_ratio = 0.5});
  expect_same_trajectory([] { return gloo(3); }, adamw, 2, true,
                         {.chunk_mb = 56 / kMiB, .issue_ratio = 0.5}, nullptr, 1e-12);
}
#endif

TEST(OverlapChunks, ThreeThreadRanksEqualPlainDdpBitForBit) {
  auto threads3 = [] {
    std::vector<std::shared_ptr<dist::ProcessGroup>> out;
    for (auto& g : thread_groups(3)) out.push_back(g);
    return out;
  };
  for (double chunk : {56 / kMiB, 64 / kMiB, 1.0, 1e30})  // 1e30: more bytes than an int64
    expect_same_trajectory(threads3, three_buckets(), 2, true,
                           {.chunk_mb = chunk, .issue_ratio = 0.5});
}

// With chunks on: no_sync accumulation, a GradScaler skip, clipping,
// gradient copies, and the backwards that take the synchronous path
// (static_graph's first, find_unused_parameters' all, sent whole) give
// plain DDP's trajectories.
TEST(OverlapChunks, NoSyncGradScalerCopiesStaticGraphAndUnusedEqualPlainDdp) {
  const OverlapChunks chunks{.chunk_mb = 56 / kMiB, .issue_ratio = 0.5};
  expect_same_trajectory(threads2, three_buckets(Recipe{.opt = Opt::kAdamW, .micro = 3}), 2, true,
                         chunks);
  expect_same_trajectory(threads2,
                         three_buckets(Recipe{.steps = 4, .nan_step = 2, .grad_scaler = true}), 2,
                         true, chunks);
  expect_same_trajectory(threads2, three_buckets(Recipe{.clip = true}), 2, true, chunks);
  Recipe view_off = three_buckets();
  view_off.ddp.gradient_as_bucket_view = false;
  expect_same_trajectory(threads2, view_off, 2, true, chunks);
  Recipe stat = three_buckets();
  stat.ddp.static_graph = true;
  Runs over;
  expect_same_trajectory(threads2, stat, 2, true, chunks, &over);
  ASSERT_EQ(over[0].chunk_launches.size(), 5u);
  EXPECT_TRUE(over[0].chunk_launches[0].empty());  // the first backward: synchronous, whole
  EXPECT_FALSE(over[0].chunk_launches[1].empty());
  Recipe unused = three_buckets();
  unused.ddp.find_unused_parameters = true;
  expect_same_trajectory(threads2, unused, 2, false, chunks, &over);
  for (const auto& launches : over[0].chunk_launches) EXPECT_TRUE(launches.empty());
}

// The exact order, by hand: eight one-parameter buckets of 3, 24, 8, 96,
// 12, 144, 12 and 72 f64 elements (bytes: 24, 192, 64, 768, 96, 1152, 96,
// 576), chunks of 32 elements, half the released bytes issued during
// backward, the last three buckets held back. During backward:
//   bucket 0 released:   24 bytes, budget  12: nothing
//   bucket 1 released:  216 bytes, budget 108: b0 (issued 24)
//   bucket 2 released:  280 bytes, budget 140: nothing (b1 would make 216)
//   bucket 3 released: 1048 bytes, budget 524: b1, b2 (issued 280)
//   bucket 4 released: 1144 bytes, budget 572: b3's first chunk (536)
// At the end, from the last bucket down: b7 (32, 32, 8), b6, b5 (32 x 4,
// 16), then the backlog: b4, and b3's other two chunks.
TEST(OverlapChunks, FirstLayersChunksOvertakeTheBacklog) {
  auto group = std::make_shared<ddp::test::WorldOfOne>();
  auto model = make_mlp();
  DistributedDataParallel<nn::Sequential> ddp(model, group,
                                              {.bucket_cap_mb = 1e-6, .broadcast_buffers = false,
                                               .rebuild_buckets = false});
  optim::SGD opt(model->parameters(), 0.1);
  ddp.overlap_step(opt, 3, {.chunk_mb = 256 / kMiB, .issue_ratio = 0.5});
  sum(ddp(batch(0, 0))).backward();
  const std::vector<int64_t> sizes = {3, 24, 8, 32, 32, 32, 8, 12, 32, 32, 32, 32, 16, 12, 32, 32};
  EXPECT_EQ(group->allreduce_sizes, sizes);
  const auto& launches = ddp.reducer().last_chunk_launches();
  ASSERT_EQ(launches.size(), sizes.size());
  EXPECT_EQ(expect_chunk_order(launches, 5), 3u);
  EXPECT_FALSE(launches[3].at_end);
  EXPECT_EQ(launches[4], (ChunkLaunch{.bucket = 7, .chunk = 0, .offset = 0, .numel = 32,
                                      .at_end = true}));
  EXPECT_EQ(launches[15], (ChunkLaunch{.bucket = 3, .chunk = 2, .offset = 64, .numel = 32,
                                       .at_end = true}));
  opt.step();
  opt.zero_grad();
  ddp.synchronize_step();

  // chunk_mb 0: whole buckets, as without the option.
  auto whole_group = std::make_shared<ddp::test::WorldOfOne>();
  auto whole_model = make_mlp();
  DistributedDataParallel<nn::Sequential> whole(
      whole_model, whole_group,
      {.bucket_cap_mb = 1e-6, .broadcast_buffers = false, .rebuild_buckets = false});
  optim::SGD whole_opt(whole_model->parameters(), 0.1);
  whole.overlap_step(whole_opt, 3, {.chunk_mb = 0, .issue_ratio = 0.5});
  sum(whole(batch(0, 0))).backward();
  EXPECT_EQ(whole_group->allreduce_sizes, (std::vector<int64_t>{3, 24, 8, 96, 12, 72, 12, 144}));
  EXPECT_TRUE(whole.reducer().last_chunk_launches().empty());
  whole.synchronize_step();
}

TEST(OverlapChunks, AFailedChunkIsRaisedByTheNextForwardWithEveryGradCleared) {
  auto group = std::make_shared<FailingGroup>(/*fail_at=*/3);  // bucket 3's first chunk
  auto model = make_mlp();
  DistributedDataParallel<nn::Sequential> ddp(model, group,
                                              {.bucket_cap_mb = 1e-6, .broadcast_buffers = false,
                                               .rebuild_buckets = false});
  optim::SGD opt(model->parameters(), 0.1);
  ddp.overlap_step(opt, 3, {.chunk_mb = 256 / kMiB, .issue_ratio = 0.5});
  sum(ddp(batch(0, 0))).backward();
  EXPECT_TRUE(ddp.reducer().overlap_pending());
  opt.step();
  EXPECT_THROW(ddp(batch(0, 1)), DistNetworkError);
  for (const Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  sum(ddp(batch(0, 2))).backward();  // the job goes on
  opt.step();
  ddp.synchronize_step();
}

TEST(OverlapChunks, BadChunkSizeOrRatioRaiseValueErrorAndChangeNothing) {
  auto model = make_mlp();
  DistributedDataParallel<nn::Sequential> ddp(model, ddp::test::solo());
  optim::SGD opt(model->parameters(), 0.1);
  auto expect_error = [&](OverlapChunks chunks, const std::string& words) {
    try {
      ddp.overlap_step(opt, 2, chunks);
      ADD_FAILURE() << "accepted chunk_mb " << chunks.chunk_mb << ", ratio " << chunks.issue_ratio;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
    EXPECT_FALSE(ddp.overlaps_step());
    EXPECT_FALSE(opt.has_deferral());
  };
  expect_error({.chunk_mb = -1}, "chunk_mb must be >= 0");
  expect_error({.chunk_mb = NAN}, "chunk_mb must be >= 0");
  expect_error({.chunk_mb = 1, .issue_ratio = 0}, "issue_ratio must be in (0, 1]");
  expect_error({.chunk_mb = 1, .issue_ratio = -0.5}, "issue_ratio must be in (0, 1]");
  expect_error({.chunk_mb = 1, .issue_ratio = 1.5}, "issue_ratio must be in (0, 1]");
  expect_error({.chunk_mb = 1, .issue_ratio = NAN}, "issue_ratio must be in (0, 1]");
  ddp.overlap_step(opt, 2, {.chunk_mb = 1, .issue_ratio = 1});
  EXPECT_TRUE(ddp.overlaps_step());
}

}  // namespace
