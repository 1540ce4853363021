// Where DistributedDataParallel must behave exactly like PyTorch's: when
// unused parameters are marked, what a parameter no rank used keeps, buffer
// broadcasts and no_sync, gradient copies (gradient_as_bucket_view), a
// failed bucket's buffer, static_graph, and the Reducer's APIs for automatic
// bucket sizes. Ranks are threads (thread_group.h); f64 where values must be
// equal.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/nn/linear.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/distributed.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "parallel/thread_group.h"

using namespace ddp;
using namespace ddp::parallel;
using ddp::test::on_every_rank;
using ddp::test::solo;
using ddp::test::thread_groups;

namespace {

// Two linear heads; `b` takes part in the output only when use_b is set.
struct TwoHeads : nn::Module {
  explicit TwoHeads(DType dtype = DType::f64) : Module("TwoHeads") {
    manual_seed(5);
    a = register_module("a", std::make_shared<nn::Linear>(3, 2));
    b = register_module("b", std::make_shared<nn::Linear>(3, 2));
    register_buffer("count", Tensor::zeros({1}));
    to(dtype);
  }
  Tensor forward(const Tensor& x) { return use_b ? a->forward(x) + b->forward(x) : a->forward(x); }
  std::shared_ptr<nn::Linear> a, b;
  bool use_b = false;
};

// A generator of its own: ranks are threads, the global one is shared.
Tensor input(int rank) {
  Generator gen(uint64_t(100 + rank));
  return randn({4, 3}, DType::f64, &gen);
}

// Models are built before the rank threads start (their initialisation
// draws from the global generator).
std::vector<std::shared_ptr<TwoHeads>> models(int n) {
  std::vector<std::shared_ptr<TwoHeads>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_shared<TwoHeads>());
  return out;
}

std::vector<double> grad_of(const Tensor& p) { return p.grad().to_vector<double>(); }

// Note [Unused parameters]: nothing is launched inside forward, so a
// collective between forward and backward keeps its place on every rank.
TEST(DDPSemantics, UnusedParametersAreMarkedAtTheFirstHookNotInForward) {
  auto group = solo();
  auto model = std::make_shared<TwoHeads>();
  DistributedDataParallel<TwoHeads> ddp(model, group,
                                        {.bucket_cap_mb = 1e-6, .find_unused_parameters = true});
  Tensor loss = sum(ddp(input(0)));
  EXPECT_EQ(group->allreduces.load(), 0) << "a bucket of unused parameters went out in forward";
  loss.backward();
  // Four buckets (one per parameter) and the used flags.
  EXPECT_EQ(group->allreduces.load(), 5);
  EXPECT_FALSE(model->b->weight.grad().defined());
  EXPECT_TRUE(model->a->weight.grad().defined());
  // Note [Rebuilding buckets]: no rebuild from an order that differs by rank.
  sum(ddp(input(1))).backward();
  EXPECT_FALSE(ddp.reducer().buckets_rebuilt());
}

// The same across ranks: a loss allreduce between forward and backward
// meets the other rank's loss allreduce, although a layer is unused on one
// rank only (its bucket would have gone out in forward there).
TEST(DDPSemantics, ALoggedLossAllreduceBetweenForwardAndBackwardKeepsItsPlace) {
  auto groups = thread_groups(2);
  auto all = models(2);
  std::vector<double> logged(2), local(2);
  on_every_rank(2, [&](int rank) {
    auto model = all[size_t(rank)];
    model->use_b = rank == 0;
    DistributedDataParallel<TwoHeads> ddp(model, groups[size_t(rank)],
                                          {.bucket_cap_mb = 1e-6, .find_unused_parameters = true});
    Tensor loss = sum(ddp(input(rank)));
    Tensor copy = loss.detach().clone().reshape({1});
    local[size_t(rank)] = copy.item<double>();
    groups[size_t(rank)]->allreduce({copy})->wait();
    logged[size_t(rank)] = copy.item<double>();
    loss.backward();
  });
  EXPECT_DOUBLE_EQ(logged[0], local[0] + local[1]);
  EXPECT_DOUBLE_EQ(logged[1], local[0] + local[1]);
}

// A parameter no rank used keeps its own .grad, not the average of all.
TEST(DDPSemantics, AParameterUnusedOnAllRanksKeepsItsGradUntouched) {
  auto groups = thread_groups(2);
  auto all = models(2);
  std::vector<std::vector<double>> b_grads(2), a_grads(2);
  on_every_rank(2, [&](int rank) {
    auto model = all[size_t(rank)];
    DistributedDataParallel<TwoHeads> ddp(model, groups[size_t(rank)],
                                          {.find_unused_parameters = true});
    model->b->weight.set_grad(Tensor::full({2, 3}, double(rank + 1), DType::f64));
    sum(ddp(input(rank))).backward();
    b_grads[size_t(rank)] = grad_of(model->b->weight);
    a_grads[size_t(rank)] = grad_of(model->a->weight);
    EXPECT_FALSE(model->b->bias.grad().defined());
  });
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_EQ(b_grads[size_t(rank)], std::vector<double>(6, double(rank + 1))) << "rank " << rank;
  EXPECT_EQ(a_grads[0], a_grads[1]);  // the used one is averaged
}

// A parameter used on one rank only: the average of (its gradient there,
// the other rank's existing .grad), as one process accumulating would give.
TEST(DDPSemantics, AParameterUsedOnSomeRanksIsAveraged) {
  auto groups = thread_groups(2);
  std::vector<std::vector<double>> got(2);
  auto all = models(2);
  on_every_rank(2, [&](int rank) {
    auto model = all[size_t(rank)];
    model->use_b = rank == 0;
    DistributedDataParallel<TwoHeads> ddp(model, groups[size_t(rank)],
                                          {.find_unused_parameters = true});
    sum(ddp(input(rank))).backward();
    got[size_t(rank)] = grad_of(model->b->weight);
  });
  auto ref = std::make_shared<TwoHeads>();
  ref->use_b = true;
  sum(ref->forward(input(0))).backward();
  std::vector<double> expect = grad_of(ref->b->weight);
  for (double& v : expect) v /= 2;
  for (int rank = 0; rank < 2; ++rank)
    for (size_t k = 0; k < expect.size(); ++k) EXPECT_DOUBLE_EQ(got[size_t(rank)][k], expect[k]);
}

TEST(DDPSemantics, BuffersAreNotBroadcastInsideNoSyncAndGoOutInOneCollective) {
  auto groups = thread_groups(2);
  std::vector<int> outside(2), inside(2);
  auto all = models(2);
  on_every_rank(2, [&](int rank) {
    auto& g = *groups[size_t(rank)];
    auto model = all[size_t(rank)];
    model->register_buffer("second", Tensor::zeros({3}));
    DistributedDataParallel<TwoHeads> ddp(model, groups[size_t(rank)]);
    int before = g.broadcasts.load();
    {
      auto guard = ddp.no_sync();
      sum(ddp(input(rank))).backward();
    }
    inside[size_t(rank)] = g.broadcasts.load() - before;
    before = g.broadcasts.load();
    sum(ddp(input(rank))).backward();
    outside[size_t(rank)] = g.broadcasts.load() - before;
  });
  EXPECT_EQ(inside, std::vector<int>({0, 0}));
  EXPECT_EQ(outside, std::vector<int>({1, 1}));  // two buffers, one broadcast
}

// Note [Gradient as bucket view]: how many gradient copies a step costs.
uint64_t copies_in_second_step(bool as_view, bool set_to_none) {
  auto model = std::make_shared<TwoHeads>();
  model->use_b = true;
  DistributedDataParallel<TwoHeads> ddp(model, solo(), {.gradient_as_bucket_view = as_view});
  optim::SGD opt(model->parameters(), 0.1);
  uint64_t before = 0;
  for (int step = 0; step < 2; ++step) {
    before = ddp.reducer().grad_copies();
    opt.zero_grad(set_to_none);
    sum(ddp(input(step))).backward();
    opt.step();
  }
  return ddp.reducer().grad_copies() - before;
}

TEST(DDPSemantics, GradientAsBucketViewCopiesNoGradientWithZeroGradInPlace) {
  EXPECT_EQ(copies_in_second_step(true, false), 0u);
  EXPECT_EQ(copies_in_second_step(true, true), 4u);    // each fresh .grad moves in once
  EXPECT_EQ(copies_in_second_step(false, false), 8u);  // in and out again
}

TEST(DDPSemantics, GradientsAreEqualWithAndWithoutBucketViews) {
  std::vector<std::vector<double>> grads[2];
  for (bool as_view : {true, false}) {
    auto model = std::make_shared<TwoHeads>();
    model->use_b = true;
    DistributedDataParallel<TwoHeads> ddp(model, solo(), {.gradient_as_bucket_view = as_view});
    sum(ddp(input(0))).backward();
    for (const Tensor& p : model->parameters()) grads[as_view].push_back(grad_of(p));
  }
  EXPECT_EQ(grads[0], grads[1]);
}

// Note [Bucket errors]: a collective that failed may still complete later
// and write its buffer; no .grad may ever view that buffer again.
TEST(DDPSemantics, ALateCompletionOfAFailedBucketNeverReachesAGrad) {
  auto model = std::make_shared<TwoHeads>();
  model->use_b = true;
  DistributedDataParallel<TwoHeads> ddp(model, solo(), {.rebuild_buckets = false});
  bool fail = true;
  Tensor failed_buffer;
  ddp.register_comm_hook([&](dist::ProcessGroup& g, GradBucket& bucket) {
    if (!fail) return allreduce_hook(g, bucket);
    auto work = std::make_shared<dist::Work>("allreduce");
    failed_buffer = bucket.buffer;
    try {
      DDP_THROW(DistNetworkError, "allreduce: peer vanished");
    } catch (...) {
      work->mark_completed(std::current_exception());
    }
    return BucketWork{work, {}};
  });
  EXPECT_THROW(sum(ddp(input(0))).backward(), DistNetworkError);
  for (const Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  fail = false;
  sum(ddp(input(1))).backward();
  std::vector<std::vector<double>> good;
  for (const Tensor& p : model->parameters()) good.push_back(grad_of(p));
  failed_buffer.fill_(999.0);  // the failed collective completes after all
  for (size_t k = 0; k < good.size(); ++k)
    EXPECT_EQ(grad_of(model->parameters()[k]), good[k]) << "parameter " << k;
}

// Note [Static graph]: the same gradients as find_unused_parameters, the
// unused parameters learnt in the first iteration, no walk afterwards.
TEST(DDPSemantics, StaticGraphGivesTheSameGradientsAsFindUnused) {
  auto groups = thread_groups(2);
  std::vector<std::vector<double>> results[2][2];
  for (int mode = 0; mode < 2; ++mode) {
    auto all = models(2);
    on_every_rank(2, [&](int rank) {
      auto model = all[size_t(rank)];
      DDPOptions o;
      o.bucket_cap_mb = 1e-6;
      o.find_unused_parameters = mode == 0;
      o.static_graph = mode == 1;
      DistributedDataParallel<TwoHeads> ddp(model, groups[size_t(rank)], o);
      optim::SGD opt(model->parameters(), 0.1);
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad(false);
        sum(ddp(input(rank * 10 + step))).backward();
        opt.step();
      }
      if (mode == 1) {
        EXPECT_EQ(ddp.reducer().static_unused().size(), 2u);  // b.weight, b.bias
        EXPECT_TRUE(ddp.reducer().buckets_rebuilt());
        EXPECT_EQ(ddp.reducer().graph_walks(), 0u);
      } else {
        EXPECT_EQ(ddp.reducer().graph_walks(), 3u);
      }
      for (const Tensor& p : model->parameters())
        results[mode][rank].push_back(p.to_vector<double>());
      EXPECT_FALSE(model->b->weight.grad().defined());
    });
  }
  EXPECT_EQ(results[0][0], results[1][0]);
  EXPECT_EQ(results[0][1], results[1][1]);
  EXPECT_EQ(results[1][0], results[1][1]);
}

TEST(DDPSemantics, StaticGraphRejectsAParameterThatStartsBeingUsed) {
  auto model = std::make_shared<TwoHeads>();
  DistributedDataParallel<TwoHeads> ddp(model, solo(), {.static_graph = true});
  sum(ddp(input(0))).backward();
  model->use_b = true;
  try {
    sum(ddp(input(1))).backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("static_graph"), std::string::npos) << e.what();
  }
}

TEST(ReducerApis, LastGradReadyTimes) {
  auto model = std::make_shared<TwoHeads>();
  DistributedDataParallel<TwoHeads> ddp(model, solo(), {.find_unused_parameters = true});
  EXPECT_TRUE(ddp.reducer().last_grad_ready_times().empty());
  sum(ddp(input(0))).backward();
  auto times = ddp.reducer().last_grad_ready_times();
  ASSERT_EQ(times.size(), 4u);  // a.weight, a.bias, b.weight, b.bias
  EXPECT_GE(times[0].count(), 0);
  EXPECT_GE(times[1].count(), 0);
  EXPECT_EQ(times[2].count(), -1);
  EXPECT_EQ(times[3].count(), -1);
}

TEST(ReducerApis, RebuildBucketsFromAnAssignmentKeepsTheGradients) {
  auto model = std::make_shared<TwoHeads>();
  model->use_b = true;
  DistributedDataParallel<TwoHeads> ddp(model, solo(), {.rebuild_buckets = false});
  sum(ddp(input(0))).backward();
  std::vector<std::vector<double>> before;
  for (const Tensor& p : model->parameters()) before.push_back(grad_of(p));
  std::vector<std::vector<size_t>> assignment = {{0, 2}, {3}, {1}};
  ddp.reducer().rebuild_buckets(assignment);
  EXPECT_EQ(ddp.reducer().bucket_assignment(), assignment);
  EXPECT_TRUE(ddp.reducer().buckets_rebuilt());
  for (size_t k = 0; k < before.size(); ++k) EXPECT_EQ(grad_of(model->parameters()[k]), before[k]);
  // The next step runs on the new buckets.
  sum(ddp(input(1))).backward();
  EXPECT_EQ(ddp.reducer().last_timeline().size(), 3u);
}

TEST(ReducerApis, RebuildBucketsRejectsBadAssignments) {
  auto model = std::make_shared<TwoHeads>();
  DistributedDataParallel<TwoHeads> ddp(model, solo());
  auto& r = ddp.reducer();
  EXPECT_THROW(r.rebuild_buckets({{0, 1}, {2}}), ValueError);          // 3 missing
  EXPECT_THROW(r.rebuild_buckets({{0, 1}, {2, 3, 1}}), ValueError);    // 1 twice
  EXPECT_THROW(r.rebuild_buckets({{0, 1, 2, 3}, {}}), ValueError);     // empty bucket
  EXPECT_THROW(r.rebuild_buckets({{0, 1, 2, 7}}), ValueError);         // out of range
  EXPECT_EQ(r.bucket_assignment().size(), 1u);  // unchanged
}

// Note [Forward hooks]: DDP calls the wrapped module through its call
// operator, so the module's own hooks run, and what a post-hook returns is
// what the DDP forward returns (and what backward differentiates).
TEST(DDPSemantics, TheWrappedModulesForwardHooksRun) {
  manual_seed(11);
  auto model = std::make_shared<nn::Linear>(3, 2);
  model->to(DType::f64);
  DistributedDataParallel<nn::Linear> ddp(model, solo());
  int pre = 0, post = 0;
  model->register_forward_pre_hook([&](nn::Module&, Tensors&) { ++pre; });
  model->register_forward_hook([&](nn::Module&, const Tensors&, Tensors& out) {
    ++post;
    out[0] = mul(out[0], Tensor::scalar(3.0, DType::f64));
  });
  const Tensor x = Tensor::ones({4, 3}, DType::f64);
  const Tensor y = ddp(x);
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(post, 1);
  EXPECT_EQ(y.to_vector<double>(), mul(model->forward(x), Tensor::scalar(3.0, DType::f64)).to_vector<double>());
  sum(y).backward();
  // d(sum(3 (x W^T + b)))/db = 3 per row, 4 rows.
  EXPECT_EQ(grad_of(model->bias), std::vector<double>(2, 12.0));
}

}  // namespace
