// SyncBatchNorm across processes gives BatchNorm2d's numbers on the whole
// batch:
//   mpirun -np N sync_batch_norm_main --backend mpi
//   ddprun --nproc-per-node N sync_batch_norm_main --backend gloo
// Every rank builds the same global batch, runs a reference BatchNorm2d on
// all of it, and runs SyncBatchNorm on its own slice (slices of different
// sizes, one of them possibly empty). Its output slice, input-gradient slice
// and running statistics must equal the reference's, and so must the sum
// over ranks of its weight/bias gradients (what DDP's allreduce forms).
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <numeric>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/dist/init.h"
#include "ddp/nn/batch_norm.h"
#include "ddp/nn/container.h"
#include "ddp/nn/conv.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/parallel/sync_batch_norm.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "dist/multi_rank_main.h"
#include "nn/scaled_error.h"

using namespace ddp;
using parallel::SyncBatchNorm;

namespace {

dist::World g_world;
int rank() { return g_world.rank(); }
int world() { return g_world.size(); }

double tolerance(DType dt) { return dt == DType::f64 ? 1e-10 : 1e-5; }

#define EXPECT_CLOSE(got, want, tol) \
  EXPECT_LE(test::scaled_error((got), (want), 1e-6), (tol)) << #got

// Sum over ranks (a copy; t is unchanged).
Tensor summed(const Tensor& t) {
  Tensor s = t.clone();
  g_world.group->allreduce({s})->wait(std::chrono::milliseconds(60'000));
  return s;
}

void set_value(const Tensor& dst, const Tensor& src) {
  NoGradGuard no_grad;
  Tensor(dst).copy_(src);
}

// sizes[r] samples on rank r; two training steps, then one in eval.
void check_against_whole_batch(const std::vector<int64_t>& sizes, DType dt,
                               std::optional<double> momentum = 0.1) {
  SCOPED_TRACE(fmt::format("sizes {} {}", fmt::join(sizes, ","), dtype_name(dt)));
  ASSERT_EQ(int(sizes.size()), world());
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  const int64_t start = std::accumulate(sizes.begin(), sizes.begin() + rank(), int64_t(0));
  const int64_t mine_n = sizes[size_t(rank())];
  const int64_t c = 4;
  nn::BatchNorm2d ref(c, 1e-5, momentum);
  SyncBatchNorm mine(c, g_world.group, 1e-5, momentum);
  ref.to(dt);
  mine.to(dt);
  Generator gen(42);  // the same numbers on every rank
  set_value(ref.weight, uniform({c}, 0.5, 1.5, dt, &gen));
  set_value(ref.bias, randn({c}, dt, &gen));
  set_value(ref.running_mean, randn({c}, dt, &gen));
  set_value(ref.running_var, uniform({c}, 0.5, 1.5, dt, &gen));
  mine.load_state_dict(ref.state_dict());
  const double tol = tolerance(dt);
  for (bool training : {true, true, false}) {
    SCOPED_TRACE(training ? "train" : "eval");
    ref.train(training);
    mine.train(training);
    ref.zero_grad();
    mine.zero_grad();
    Tensor x = (randn({total, c, 3, 3}, dt, &gen) * 3.0 - 2.0).detach().set_requires_grad();
    Tensor dy = randn({total, c, 3, 3}, dt, &gen);
    Tensor y = ref.forward(x);
    sum(y * dy).backward();

    Tensor xr = x.detach().narrow(0, start, mine_n).clone().set_requires_grad();
    Tensor yr = mine.forward(xr);
    sum(yr * dy.narrow(0, start, mine_n)).backward();
    if (mine_n > 0) {
      EXPECT_CLOSE(yr, y.narrow(0, start, mine_n), tol);
      EXPECT_CLOSE(xr.grad(), x.grad().narrow(0, start, mine_n), tol);
    }
    EXPECT_CLOSE(summed(mine.weight.grad()), ref.weight.grad(), tol);
    EXPECT_CLOSE(summed(mine.bias.grad()), ref.bias.grad(), tol);
    EXPECT_CLOSE(mine.running_mean, ref.running_mean, tol);
    EXPECT_CLOSE(mine.running_var, ref.running_var, tol);
    EXPECT_EQ(mine.num_batches_tracked.item<int64_t>(), ref.num_batches_tracked.item<int64_t>());
  }
}

// Rank r holds r + 1 samples (3 and 5 at two ranks; 1, 2, 3 at three).
std::vector<int64_t> uneven_sizes() {
  std::vector<int64_t> s;
  for (int r = 0; r < world(); ++r) s.push_back(world() == 2 ? 3 + 2 * r : r + 1);
  return s;
}

TEST(SyncBatchNormMulti, EvenSlicesMatchWholeBatch) {
  std::vector<int64_t> sizes(size_t(world()), 2);
  check_against_whole_batch(sizes, DType::f32);
  check_against_whole_batch(sizes, DType::f64);
}

TEST(SyncBatchNormMulti, UnevenSlicesMatchWholeBatch) {
  check_against_whole_batch(uneven_sizes(), DType::f32);
  check_against_whole_batch(uneven_sizes(), DType::f64, std::nullopt);
}

TEST(SyncBatchNormMulti, ARankWithoutSamplesStillTakesPart) {
  std::vector<int64_t> sizes(size_t(world()), 3);
  sizes[size_t(world() - 1)] = 0;
  check_against_whole_batch(sizes, DType::f64);
}

// conv - SyncBatchNorm - relu - conv - SyncBatchNorm: gradients reach the
// first conv through two synchronised layers. The convolutions have no bias,
// as usual before a BatchNorm (whose mean removes it: its gradient is zero
// up to rounding, which no relative tolerance can compare).
TEST(SyncBatchNormMulti, StackedLayersMatchWholeBatch) {
  auto make = [](bool sync) {
    auto norm = [&](int64_t c) -> std::shared_ptr<nn::BatchNorm2d> {
      if (sync) return std::make_shared<SyncBatchNorm>(c, g_world.group);
      return std::make_shared<nn::BatchNorm2d>(c);
    };
    manual_seed(9);
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::Conv2d>(2, 3, 3, 1, 1, 1, 1, false));
    m->push_back(norm(3));
    m->push_back(std::make_shared<nn::Functional>([](const Tensor& t) { return relu(t); }));
    m->push_back(std::make_shared<nn::Conv2d>(3, 2, 3, 1, 1, 1, 1, false));
    m->push_back(norm(2));
    return m;
  };
  auto ref = make(false), mine = make(true);
  const std::vector<int64_t> sizes = uneven_sizes();
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  const int64_t start = std::accumulate(sizes.begin(), sizes.begin() + rank(), int64_t(0));
  Generator gen(7);
  Tensor x = randn({total, 2, 5, 5}, {}, &gen), dy = randn({total, 2, 5, 5}, {}, &gen);
  sum(ref->forward(x) * dy).backward();
  const int64_t n = sizes[size_t(rank())];
  Tensor yr = mine->forward(x.narrow(0, start, n));
  sum(yr * dy.narrow(0, start, n)).backward();
  auto got = mine->named_parameters(), want = ref->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_CLOSE(summed(got.items()[i].second.grad()), want.items()[i].second.grad(), 1e-5)
        << got.items()[i].first;
  auto got_b = mine->named_buffers(), want_b = ref->named_buffers();
  for (size_t i = 0; i < got_b.size(); ++i)
    EXPECT_CLOSE(got_b.items()[i].second, want_b.items()[i].second, 1e-5) << got_b.items()[i].first;
}

// A model whose BatchNorm2d layers are typed members, converted in place.
TEST(SyncBatchNormMulti, ConvertedResNetMatchesWholeBatch) {
  auto make = [] {
    manual_seed(3);
    return nn::models::resnet20({.in_channels = 1, .num_classes = 4});
  };
  auto ref = make(), mine = make();
  EXPECT_GT(parallel::convert_sync_batchnorm(*mine, g_world.group), 0);
  const std::vector<int64_t> sizes = uneven_sizes();
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  const int64_t start = std::accumulate(sizes.begin(), sizes.begin() + rank(), int64_t(0));
  const int64_t n = sizes[size_t(rank())];
  Generator gen(11);
  Tensor x = randn({total, 1, 8, 8}, {}, &gen), dy = randn({total, 4}, {}, &gen);
  sum(ref->forward(x) * dy).backward();
  sum(mine->forward(x.narrow(0, start, n)) * dy.narrow(0, start, n)).backward();
  for (const auto& [name, p] : ref->named_parameters())
    EXPECT_CLOSE(summed(mine->parameter(name).grad()), p.grad(), 1e-5) << name;
  for (const auto& [name, b] : ref->named_buffers())
    EXPECT_CLOSE(mine->buffer(name), b, 1e-5) << name;
}

}  // namespace

int main(int argc, char** argv) {
  g_world = test::init_test_world(argc, argv);
  return test::run_tests_on_every_rank(g_world, "sync_batch_norm_main");
}
