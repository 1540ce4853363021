// Join (Note [Join]): ranks with different numbers of batches end with the
// parameters one process gets from the same batches (each iteration's
// gradient is the sum over the ranks that still had a batch, divided by the
// world size), with find_unused_parameters, static_graph, SyncBatchNorm and
// buffer broadcasts; throw_on_early_termination makes every rank raise.
// Ranks are threads (thread_group.h); f64.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/nn/batch_norm.h"
#include "ddp/nn/linear.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/join.h"
#include "ddp/parallel/sync_batch_norm.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "parallel/thread_group.h"

using namespace ddp;
using namespace ddp::parallel;
using ddp::test::on_every_rank;
using ddp::test::thread_groups;

namespace {

constexpr double kLr = 0.1;

struct Net : nn::Module {
  Net() : Module("Net") {
    manual_seed(9);
    a = register_module("a", std::make_shared<nn::Linear>(3, 3));
    b = register_module("b", std::make_shared<nn::Linear>(3, 2));
    unused = register_module("unused", std::make_shared<nn::Linear>(3, 1));
    register_buffer("seen", Tensor::zeros({1}));
    to(DType::f64);
  }
  Tensor forward(const Tensor& x) { return b->forward(tanh(a->forward(x))); }
  std::shared_ptr<nn::Linear> a, b, unused;
};

// Generators of their own: ranks are threads, the global one is shared.
Tensor batch(int rank, int step) {
  Generator gen(uint64_t(1000 + 17 * rank + step));
  return randn({4, 3}, DType::f64, &gen);
}

// Built before the rank threads start (initialisation draws from the
// global generator).
template <class M, class... A>
std::vector<std::shared_ptr<M>> build(int n, const A&... args) {
  std::vector<std::shared_ptr<M>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_shared<M>(args...));
  return out;
}

std::vector<double> flat(const Tensors& ts) {
  std::vector<double> out;
  for (const Tensor& t : ts) {
    std::vector<double> v = t.to_vector<double>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-12) << what << " [" << k << "]";
}

// One process: per step, the gradients of the ranks that still have a batch,
// summed, divided by the world size (or by their number), then SGD.
std::vector<double> reference_net(const std::vector<int>& batches, bool by_world) {
  auto model = std::make_shared<Net>();
  optim::SGD opt(model->parameters(), kLr);
  const int world = int(batches.size());
  int steps = 0;
  for (int n : batches) steps = std::max(steps, n);
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad(false);
    int active = 0;
    for (int r = 0; r < world; ++r) {
      if (step >= batches[size_t(r)]) continue;
      ++active;
      sum(model->forward(batch(r, step))).backward();
    }
    NoGradGuard no_grad;
    for (Tensor& p : model->parameters())
      if (p.grad().defined()) p.grad().mul_(1.0 / (by_world ? world : active));
    opt.step();
  }
  return flat(model->parameters());
}

struct Case {
  std::vector<int> batches;
  bool find_unused = false;
  bool static_graph = false;
  bool by_world = true;
};

class JoinUneven : public ::testing::TestWithParam<Case> {};

TEST_P(JoinUneven, EveryRankEndsWithTheOneProcessParameters) {
  const Case c = GetParam();
  const int world = int(c.batches.size());
  auto groups = thread_groups(world);
  std::vector<std::vector<double>> params(static_cast<size_t>(world));
  auto all = build<Net>(world);
  on_every_rank(world, [&](int rank) {
    auto model = all[size_t(rank)];
    DDPOptions o;
    o.bucket_cap_mb = 1e-4;  // several buckets
    o.find_unused_parameters = c.find_unused;
    o.static_graph = c.static_graph;
    DistributedDataParallel<Net> ddp(model, groups[size_t(rank)], o);
    optim::SGD opt(model->parameters(), kLr);
    Join join({&ddp}, {.divide_by_initial_world_size = c.by_world});
    join.run([&] {
      for (int step = 0; step < c.batches[size_t(rank)]; ++step) {
        opt.zero_grad(false);
        sum(ddp(batch(rank, step))).backward();
        opt.step();
      }
    });
    params[size_t(rank)] = flat(model->parameters());
  });
  const std::vector<double> want = reference_net(c.batches, c.by_world);
  for (int rank = 0; rank < world; ++rank)
    expect_close(params[size_t(rank)], want, "rank " + std::to_string(rank));
}

std::vector<Case> cases() {
  return {
      {{3, 1}, true, false, true},
      {{1, 3, 2}, true, false, true},
      {{2, 4, 1, 3}, true, false, true},
      {{3, 0, 2}, true, false, true},   // a rank without any batch
      {{2, 3, 1}, false, true, true},   // static_graph learns the unused layer
      {{4, 2, 3}, true, false, false},  // averaged over the ranks still running
      {{2, 2}, true, false, true},      // even: join changes nothing
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, JoinUneven, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           std::string name;
                           for (int n : info.param.batches) name += std::to_string(n) + "_";
                           name += info.param.static_graph ? "Static" : "FindUnused";
                           name += info.param.by_world ? "ByWorld" : "ByActive";
                           return name;
                         });

// SyncBatchNorm inside a joined model: the statistics are those of the
// samples of the ranks still running (a joined rank adds zero counts).
struct BNNet : nn::Module {
  explicit BNNet(std::shared_ptr<dist::ProcessGroup> group) : Module("BNNet") {
    bn = register_module("bn", std::make_shared<SyncBatchNorm>(2, std::move(group)));
    to(DType::f64);
  }
  Tensor forward(const Tensor& x) { return bn->forward(x); }
  std::shared_ptr<SyncBatchNorm> bn;
};

Tensor image(int rank, int step) {
  Generator gen(uint64_t(50 + 13 * rank + step));
  return randn({2, 2, 3, 3}, DType::f64, &gen);
}

TEST(JoinSyncBatchNorm, MatchesBatchNormOverTheRunningRanksSamples) {
  const std::vector<int> batches = {3, 1, 2};
  const int world = 3;
  auto groups = thread_groups(world);
  std::vector<std::vector<double>> params(world), buffers(world);
  std::vector<std::shared_ptr<BNNet>> all;
  for (int r = 0; r < world; ++r) all.push_back(std::make_shared<BNNet>(groups[size_t(r)]));
  on_every_rank(world, [&](int rank) {
    auto model = all[size_t(rank)];
    DistributedDataParallel<BNNet> ddp(model, groups[size_t(rank)]);
    optim::SGD opt(model->parameters(), kLr);
    Join join({&ddp});
    join.run([&] {
      for (int step = 0; step < batches[size_t(rank)]; ++step) {
        opt.zero_grad(false);
        Tensor x = image(rank, step).set_requires_grad();  // SyncBatchNorm's backward allreduce too
        sum(ddp(x) * x).backward();
        opt.step();
      }
    });
    params[size_t(rank)] = flat(model->parameters());
    buffers[size_t(rank)] = flat(model->buffers());
  });
  // One process: BatchNorm2d over the running ranks' samples, concatenated.
  auto ref = std::make_shared<nn::BatchNorm2d>(2);
  ref->to(DType::f64);
  optim::SGD opt(ref->parameters(), kLr);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad(false);
    Tensors xs;
    for (int r = 0; r < world; ++r)
      if (step < batches[size_t(r)]) xs.push_back(image(r, step));
    Tensor x = cat(xs, 0).set_requires_grad();
    sum(ref->forward(x) * x).backward();
    NoGradGuard no_grad;
    for (Tensor& p : ref->parameters()) p.grad().mul_(1.0 / world);
    opt.step();
  }
  const std::vector<double> want_params = flat(ref->parameters());
  const std::vector<double> want_buffers = flat(ref->buffers());
  for (int rank = 0; rank < world; ++rank) {
    expect_close(params[size_t(rank)], want_params, "parameters of rank " + std::to_string(rank));
    expect_close(buffers[size_t(rank)], want_buffers, "buffers of rank " + std::to_string(rank));
  }
}

TEST(JoinErrors, ThrowOnEarlyTerminationRaisesOnEveryRank) {
  const std::vector<int> batches = {3, 1, 2};
  auto groups = thread_groups(3);
  std::vector<std::string> errors(3);
  std::vector<int> steps_done(3, 0);
  auto all = build<Net>(3);
  on_every_rank(3, [&](int rank) {
    auto model = all[size_t(rank)];
    DistributedDataParallel<Net> ddp(model, groups[size_t(rank)],
                                     {.find_unused_parameters = true});
    Join join({&ddp}, {.throw_on_early_termination = true});
    try {
      join.run([&] {
        for (int step = 0; step < batches[size_t(rank)]; ++step) {
          sum(ddp(batch(rank, step))).backward();
          ++steps_done[size_t(rank)];
        }
      });
    } catch (const Error& e) {
      errors[size_t(rank)] = e.what();
    }
  });
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_NE(errors[size_t(rank)].find("rank(s) 1 ran out of inputs"), std::string::npos)
        << "rank " << rank << ": " << errors[size_t(rank)];
    EXPECT_EQ(steps_done[size_t(rank)], 1) << "rank " << rank;
  }
}

TEST(JoinErrors, BadArguments) {
  EXPECT_THROW(Join({}), ValueError);
  EXPECT_THROW(Join({nullptr}), ValueError);
  auto groups = thread_groups(1);
  auto model = std::make_shared<Net>();
  DistributedDataParallel<Net> ddp(model, groups[0]);
  Join join({&ddp});
  EXPECT_THROW(join.run(nullptr), ValueError);
  // Disabled: the body just runs.
  Join off({&ddp}, {.enable = false});
  int ran = 0;
  off.run([&] { ++ran; });
  EXPECT_EQ(ran, 1);
}

// Models whose collectives a joined rank would not shadow are refused up
// front, with the reason, instead of hanging the others later.
TEST(JoinErrors, RefusesModelsItCannotShadow) {
  auto groups = thread_groups(1);
  DistributedDataParallel<Net> tuning(std::make_shared<Net>(), groups[0],
                                      {.auto_bucket_size = true});
  try {
    Join join({&tuning});
    FAIL() << "Join accepted a model still choosing its buckets";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("auto_bucket_size"), std::string::npos) << e.what();
  }
  DistributedDataParallel<Net> hooked(std::make_shared<Net>(), groups[0]);
  hooked.register_forward_pre_hook([] {});
  try {
    Join join({&hooked});
    FAIL() << "Join accepted a model with a forward pre-hook";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("ZeroRedundancyOptimizer"), std::string::npos)
        << e.what();
  }
}

}  // namespace
