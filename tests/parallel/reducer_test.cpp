// The Reducer and DistributedDataParallel in one process, over a recording
// process group: bucket assignment, .grad as bucket views, launch during
// backward and in order, rebuilding, no_sync, and the errors. Equality with
// a single process across real ranks is tests/parallel/multi.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/container.h"
#include "ddp/nn/linear.h"
#include "ddp/parallel/distributed.h"
#include "ddp/tensor/ops.h"

#include "parallel/world_of_one.h"

using namespace ddp;
using namespace ddp::parallel;

namespace {

Tensor f32(const Shape& s) { return Tensor::zeros(s); }
Tensor f64(const Shape& s) { return Tensor::zeros(s, DType::f64); }

// Three layers, each 4x4 weight + 4 bias: 20 floats = 80 bytes per layer.
std::shared_ptr<nn::Sequential> mlp() {
  manual_seed(3);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::Linear>(4, 4),
      std::make_shared<nn::Linear>(4, 4)});
}

// The gradients a plain backward gives.
std::vector<std::vector<float>> plain_grads(const Tensor& x) {
  auto m = mlp();
  sum(m->forward(x)).backward();
  std::vector<std::vector<float>> g;
  for (const Tensor& p : m->parameters()) g.push_back(p.grad().to_vector<float>());
  return g;
}

TEST(AssignBuckets, CapsTheFirstBucketSeparately) {
  Tensors p = {f32({10}), f32({10}), f32({10}), f32({10}), f32({10})};  // 40 bytes each
  auto b = assign_buckets(p, {4, 3, 2, 1, 0}, {40, 100});
  EXPECT_EQ(b, (std::vector<std::vector<size_t>>{{4}, {3, 2, 1}, {0}}));
}

TEST(AssignBuckets, SplitsByDtypeAndOrdersByFirstReady) {
  Tensors p = {f32({10}), f64({10}), f32({10}), f64({10})};
  auto b = assign_buckets(p, {3, 2, 1, 0}, {1000});
  EXPECT_EQ(b, (std::vector<std::vector<size_t>>{{3, 1}, {2, 0}}));
}

TEST(AssignBuckets, AParameterLargerThanTheCapGetsItsOwnBucket) {
  Tensors p = {f32({1}), f32({1000}), f32({1})};
  auto b = assign_buckets(p, {2, 1, 0}, {16});
  EXPECT_EQ(b, (std::vector<std::vector<size_t>>{{2, 1}, {0}}));
}

TEST(AssignBuckets, BadArguments) {
  Tensors p = {f32({1})};
  EXPECT_THROW(assign_buckets(p, {0}, {}), ValueError);
  EXPECT_THROW(assign_buckets(p, {1}, {16}), ValueError);
}

TEST(Reducer, GradientsAreViewsIntoBucketsAndEqualPlainBackward) {
  auto group = std::make_shared<ddp::test::WorldOfOne>();
  auto model = mlp();
  DistributedDataParallel<nn::Sequential> ddp_model(model, group, {.bucket_cap_mb = 1});
  Tensor x = randn({2, 4});
  sum(ddp_model(x)).backward();
  auto want = plain_grads(x);
  Tensors params = model->parameters();
  ASSERT_EQ(ddp_model.reducer().num_buckets(), 1u);
  const void* base = params[0].grad().storage().data();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].grad().storage().data(), base) << "param " << i;
    EXPECT_EQ(params[i].grad().to_vector<float>(), want[i]) << "param " << i;
  }
  EXPECT_EQ(group->allreduce_sizes, (std::vector<int64_t>{60}));
}

// Every bucket but the one holding the first layer is launched before the
// first layer's gradient (the last of backward) is ready: the communication
// overlaps the rest of backward.
TEST(Reducer, LaunchesBucketsInOrderWhileBackwardRuns) {
  auto group = std::make_shared<ddp::test::WorldOfOne>();
  auto model = mlp();
  DistributedDataParallel<nn::Sequential> ddp_model(model, group, {.bucket_cap_mb = 1e-5});
  // 1e-5 MiB = 10 bytes: every parameter its own bucket, 6 in all.
  ASSERT_EQ(ddp_model.reducer().num_buckets(), 6u);
  size_t launched_before_last = 0;
  Tensor first_weight = model->parameters()[0];
  int h = first_weight.register_post_accumulate_grad_hook(
      [&](Tensor&) { launched_before_last = group->allreduce_sizes.size(); });
  sum(ddp_model(randn({2, 4}))).backward();
  first_weight.remove_post_accumulate_grad_hook(h);
  // The DDP hook was registered first, so it ran first: by then the first
  // weight's own bucket (index 5 or 4) may be out too; the others surely.
  EXPECT_GE(launched_before_last, 4u);
  // Reverse registration order: bias3, weight3, bias2, ... (sizes 4, 16, ...).
  EXPECT_EQ(group->allreduce_sizes, (std::vector<int64_t>{4, 16, 4, 16, 4, 16}));
  const auto& timeline = ddp_model.reducer().last_timeline();
  ASSERT_EQ(timeline.size(), 6u);
  for (const auto& t : timeline) {
    EXPECT_LE(t.ready, t.launched);
    EXPECT_LE(t.launched, t.done);
  }
}

// Layers registered in the opposite order of their use: after the first
// iteration the buckets follow the order gradients actually arrived in.
class Reversed : public nn::Module {
 public:
  Reversed() : nn::Module("Reversed") {
    manual_seed(5);
    last = register_module("last", std::make_shared<nn::Linear>(4, 4));
    first = register_module("first", std::make_shared<nn::Linear>(4, 4));
  }
  Tensor forward(const Tensor& x) { return last->forward(first->forward(x)); }
  std::shared_ptr<nn::Linear> last, first;
};

TEST(Reducer, RebuildsBucketsInTheOrderGradientsArrived) {
  auto group = std::make_shared<ddp::test::WorldOfOne>();
  auto model = std::make_shared<Reversed>();
  DistributedDataParallel<Reversed> ddp_model(model, group, {.bucket_cap_mb = 1e-5});
  // Registration order: last.weight 0, last.bias 1, first.weight 2, first.bias 3.
  EXPECT_EQ(ddp_model.reducer().bucket_assignment(),
            (std::vector<std::vector<size_t>>{{3}, {2}, {1}, {0}}));
  Tensor x = randn({2, 4});
  sum(ddp_model(x)).backward();
  std::vector<std::vector<float>> before;
  for (const Tensor& p : model->parameters()) before.push_back(p.grad().to_vector<float>());
  EXPECT_FALSE(ddp_model.reducer().buckets_rebuilt());
  {
    NoGradGuard no_grad;  // an evaluation forward does not rebuild
    ddp_model(x);
  }
  EXPECT_FALSE(ddp_model.reducer().buckets_rebuilt());
  ddp_model(x);  // the next training forward does
  EXPECT_TRUE(ddp_model.reducer().buckets_rebuilt());
  auto order = ddp_model.reducer().bucket_assignment();
  ASSERT_EQ(order.size(), 4u);
  // "last" is used last in forward, so its gradients are ready first.
  EXPECT_TRUE((order[0] == std::vector<size_t>{1} || order[0] == std::vector<size_t>{0}));
  EXPECT_TRUE((order[3] == std::vector<size_t>{2} || order[3] == std::vector<size_t>{3}));
  // The gradients survived the move into the new buckets.
  Tensors params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(params[i].grad().to_vector<float>(), before[i]);
}

TEST(Reducer, NoSyncAccumulatesLocallyAndTheNextBackwardReducesTheSum) {
  auto group = std::make_shared<ddp::test::WorldOfOne>();
  auto model = mlp();
  DistributedDataParallel<nn::Sequential> ddp_model(model, group, {});
  Tensor x = randn({2, 4});
  {
    auto guard = ddp_model.no_sync();
    EXPECT_FALSE(ddp_model.require_backward_grad_sync());
    sum(ddp_model(x)).backward();
    sum(ddp_model(x)).backward();
  }
  EXPECT_TRUE(ddp_model.require_backward_grad_sync());
  EXPECT_TRUE(group->allreduce_sizes.empty());
  sum(ddp_model(x)).backward();
  EXPECT_EQ(group->allreduce_sizes.size(), 1u);
  auto once = plain_grads(x);
  Tensors params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    auto g = params[i].grad().to_vector<float>();
    for (size_t k = 0; k < g.size(); ++k) EXPECT_NEAR(g[k], 3 * once[i][k], 1e-5);
  }
}

TEST(Reducer, ExistingGradientsMoveIntoTheBuckets) {
  auto group = std::make_shared<ddp::test::WorldOfOne>();
  auto model = mlp();
  Tensor x = randn({2, 4});
  sum(model->forward(x)).backward();
  std::vector<std::vector<float>> before;
  for (const Tensor& p : model->parameters()) before.push_back(p.grad().to_vector<float>());
  DistributedDataParallel<nn::Sequential> ddp_model(model, group, {});
  Tensors params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].grad().to_vector<float>(), before[i]);
    EXPECT_EQ(params[i].grad().storage().data(), params[0].grad().storage().data());
  }
}

TEST(ReducerErrors, TwoBackwardsForOneForward) {
  auto group = std::make_shared<ddp::test::WorldOfOne>();
  auto model = mlp();
  DistributedDataParallel<nn::Sequential> ddp_model(model, group, {});
  Tensor loss = sum(ddp_model(randn({2, 4})));
  loss.backward(Tensor(), /*retain_graph=*/true);
  try {
    loss.backward();
    ADD_FAILURE() << "a second backward should raise";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("second backward"), std::string::npos) << e.what();
  }
  // The next iteration works.
  sum(ddp_model(randn({2, 4}))).backward();
}

TEST(ReducerErrors, BadConstruction) {
  auto group = std::make_shared<ddp::test::WorldOfOne>();
  auto model = mlp();
  EXPECT_THROW(DistributedDataParallel<nn::Sequential>(nullptr, group, {}), ValueError);
  EXPECT_THROW(DistributedDataParallel<nn::Sequential>(model, nullptr, {}), ValueError);
  EXPECT_THROW(DistributedDataParallel<nn::Sequential>(model, group, {.bucket_cap_mb = 0}),
               ValueError);
  Tensor p = Tensor::zeros({2}).set_requires_grad();
  EXPECT_THROW(Reducer({p, p}, {"a", "b"}, group, {}), ValueError);      // listed twice
  EXPECT_THROW(Reducer({p}, {"a", "b"}, group, {}), ValueError);         // names
  Tensor not_leaf = mul(p, 2.0);
  EXPECT_THROW(Reducer({not_leaf}, {"x"}, group, {}), ValueError);
  Tensor ints = Tensor::zeros({2}, DType::i64);
  EXPECT_THROW(Reducer({ints}, {"i"}, group, {}), ValueError);
}

TEST(ReducerErrors, CommHooks) {
  auto group = std::make_shared<ddp::test::WorldOfOne>();
  auto model = mlp();
  DistributedDataParallel<nn::Sequential> ddp_model(model, group, {});
  EXPECT_THROW(ddp_model.register_comm_hook(nullptr), ValueError);
  ddp_model.register_comm_hook([](dist::ProcessGroup&, GradBucket&) { return BucketWork{}; });
  EXPECT_THROW(ddp_model.register_comm_hook(allreduce_hook), ValueError);  // one per model
  // A hook that returns no work is reported, naming the bucket.
  try {
    sum(ddp_model(randn({2, 4}))).backward();
    ADD_FAILURE() << "a hook without work should raise";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("returned no work for bucket 0"), std::string::npos)
        << e.what();
  }
}

}  // namespace
