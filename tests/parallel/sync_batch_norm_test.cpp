// SyncBatchNorm in one process: on a group of one rank it is BatchNorm2d
// (module and functional, forward, backward and running statistics), its
// backward passes gradcheck in f64, bad inputs raise, and on a simulated
// group of 2 or 3 ranks (threads of this process; see ThreadGroup in thread_group.h) each
// rank's slice of a batch gets what BatchNorm2d gives the whole batch.
// The same equality across real processes (mpi, gloo) is in
// tests/parallel/multi/sync_batch_norm_main.cpp.
#include "ddp/parallel/sync_batch_norm.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ddp/amp/autocast.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/autograd/gradcheck.h"
#include "ddp/nn/container.h"
#include "ddp/nn/functional/batch_norm.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"
#include "parallel/thread_group.h"

namespace ddp::test {
namespace {

using parallel::SyncBatchNorm;

void set_value(const Tensor& dst, const Tensor& src) {
  NoGradGuard no_grad;
  Tensor(dst).copy_(src);
}

// Random affine parameters and running statistics, the same in both.
void randomise(nn::BatchNorm2d& a, nn::BatchNorm2d& b, DType dt) {
  const int64_t c = a.num_features();
  if (a.weight.defined()) {
    Tensor w = rand({c}, dt) + 0.5, bias = randn({c}, dt);
    for (nn::BatchNorm2d* m : {&a, &b}) set_value(m->weight, w), set_value(m->bias, bias);
  }
  if (a.running_mean.defined()) {
    Tensor rm = randn({c}, dt), rv = rand({c}, dt) + 0.5;
    for (nn::BatchNorm2d* m : {&a, &b})
      set_value(m->running_mean, rm), set_value(m->running_var, rv);
  }
}

double tolerance(DType dt) { return dt == DType::f64 ? 1e-10 : 1e-5; }

#define EXPECT_CLOSE(got, want, tol) EXPECT_LE(scaled_error((got), (want), 1e-6), (tol)) << #got

// ---- a group of one rank ---------------------------------------------------

TEST(SyncBatchNormSolo, ModuleIsBatchNorm2dExactly) {
  for (std::optional<double> momentum : {std::optional<double>(0.1), std::optional<double>()}) {
    manual_seed(1);
    auto group = solo();
    SyncBatchNorm sync(3, group, 1e-3, momentum);
    nn::BatchNorm2d plain(3, 1e-3, momentum);
    EXPECT_EQ(sync.state_dict().keys(), plain.state_dict().keys());
    randomise(sync, plain, DType::f32);
    for (bool training : {true, true, false}) {
      sync.train(training);
      plain.train(training);
      Tensor x = randn({4, 3, 5, 2}).set_requires_grad();
      Tensor x2 = x.detach().clone().set_requires_grad();
      Tensor dy = randn({4, 3, 5, 2});
      Tensor y = sync.forward(x), y2 = plain.forward(x2);
      sum(y * dy).backward();
      sum(y2 * dy).backward();
      EXPECT_EQ(max_abs_error(y, y2), 0.0);
      EXPECT_EQ(max_abs_error(x.grad(), x2.grad()), 0.0);
      EXPECT_EQ(max_abs_error(sync.weight.grad(), plain.weight.grad()), 0.0);
      EXPECT_EQ(max_abs_error(sync.bias.grad(), plain.bias.grad()), 0.0);
      EXPECT_EQ(max_abs_error(sync.running_mean, plain.running_mean), 0.0);
      EXPECT_EQ(max_abs_error(sync.running_var, plain.running_var), 0.0);
    }
    EXPECT_EQ(sync.num_batches_tracked.item<int64_t>(), 2);
    EXPECT_EQ(group->allreduces.load(), 0);  // nothing to synchronise with
  }
}

// The synchronised path itself, through a group of one: BatchNorm2d's
// numbers, with one allreduce forward and one backward.
void check_functional_against_batch_norm(DType dt, bool affine, bool channels_last) {
  SCOPED_TRACE(fmt::format("{} affine={} channels_last={}", dtype_name(dt), affine, channels_last));
  manual_seed(2);
  auto group = solo();
  const int64_t c = 4;
  Tensor x = randn({3, c, 4, 5}, dt);
  if (channels_last) x = nn::functional::to_channels_last(x);
  x = x.detach().set_requires_grad();
  Tensor x2 = x.detach().clone().set_requires_grad();
  Tensor w, b, w2, b2;
  if (affine) {
    w = (rand({c}, dt) + 0.5).detach().set_requires_grad();
    b = randn({c}, dt).set_requires_grad();
    w2 = w.detach().clone().set_requires_grad();
    b2 = b.detach().clone().set_requires_grad();
  }
  Tensor rm = randn({c}, dt), rv = rand({c}, dt) + 0.5;
  Tensor rm2 = rm.clone(), rv2 = rv.clone();
  Tensor dy = randn({3, c, 4, 5}, dt);
  Tensor y = parallel::sync_batch_norm(x, rm, rv, w, b, 0.3, 1e-4, group);
  Tensor y2 = nn::functional::batch_norm(x2, rm2, rv2, w2, b2, true, 0.3, 1e-4);
  EXPECT_EQ(y.dtype(), dt);
  EXPECT_EQ(nn::functional::is_channels_last(y), channels_last);
  sum(y * dy).backward();
  sum(y2 * dy).backward();
  EXPECT_EQ(group->allreduces.load(), 2);
  const double tol = tolerance(dt);
  EXPECT_CLOSE(y, y2, tol);
  EXPECT_CLOSE(x.grad(), x2.grad(), tol);
  EXPECT_CLOSE(rm, rm2, tol);
  EXPECT_CLOSE(rv, rv2, tol);
  if (affine) {
    EXPECT_CLOSE(w.grad(), w2.grad(), tol);
    EXPECT_CLOSE(b.grad(), b2.grad(), tol);
  }
}

TEST(SyncBatchNormSolo, FunctionalMatchesBatchNorm) {
  for (DType dt : {DType::f32, DType::f64})
    for (bool affine : {true, false})
      for (bool channels_last : {false, true})
        check_functional_against_batch_norm(dt, affine, channels_last);
}

TEST(SyncBatchNormSolo, HalfInputsComputeInF32) {
  manual_seed(4);
  auto group = solo();
  Tensor x = randn({4, 2, 3, 3});
  Tensor y = parallel::sync_batch_norm(x.to(DType::bf16), {}, {}, {}, {}, 0.1, 1e-5, group);
  EXPECT_EQ(y.dtype(), DType::bf16);
  Tensor want = nn::functional::batch_norm(x, {}, {}, {}, {}, true);
  EXPECT_LE(scaled_error(y, want), 1e-2);  // bf16 keeps 8 bits of mantissa
}

// Under autocast both paths follow batch_norm's keep_input policy: the
// input's bf16 out, f32 inside.
TEST(SyncBatchNormSolo, AutocastKeepsTheInputDTypeLikeBatchNorm) {
  manual_seed(4);
  auto group = solo();
  Tensor x = randn({4, 2, 3, 3}).to(DType::bf16);
  amp::Autocast autocast(DeviceType::CPU, DType::bf16);
  Tensor y = parallel::sync_batch_norm(x, {}, {}, {}, {}, 0.1, 1e-5, group);
  Tensor want = nn::functional::batch_norm(x, {}, {}, {}, {}, true);
  EXPECT_EQ(want.dtype(), DType::bf16);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_LE(scaled_error(y, want), 1.0 / 256);  // both round f32 results once
}

// Without an input gradient the backward needs no collective: the
// parameters' gradients are local.
TEST(SyncBatchNormSolo, NoBackwardAllreduceWithoutInputGradient) {
  auto group = solo();
  Tensor x = randn({2, 3, 2, 2});
  Tensor w = Tensor::ones({3}).set_requires_grad(), b = Tensor::zeros({3}).set_requires_grad();
  sum(parallel::sync_batch_norm(x, {}, {}, w, b, 0.1, 1e-5, group)).backward();
  EXPECT_EQ(group->allreduces.load(), 1);
  ASSERT_TRUE(b.grad().defined());
  EXPECT_CLOSE(b.grad(), Tensor::full({3}, 8.0), 1e-6);  // N·H·W ones per channel
}

TEST(SyncBatchNormSolo, Gradcheck) {
  manual_seed(5);
  auto group = solo();
  Tensor x = randn({3, 2, 3, 2}, DType::f64).set_requires_grad();
  Tensor w = (rand({2}, DType::f64) + 0.5).detach().set_requires_grad();
  Tensor b = randn({2}, DType::f64).set_requires_grad();
  auto fn = [&](const Tensors& in) {
    return Tensors{
        parallel::sync_batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], 0.1, 1e-5, group)};
  };
  auto r = autograd::gradcheck(fn, {x, w, b});
  EXPECT_TRUE(r.ok) << r.message;
  auto fn_plain = [&](const Tensors& in) {
    return Tensors{
        parallel::sync_batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5, group)};
  };
  r = autograd::gradcheck(fn_plain, {x});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(SyncBatchNormErrors, BadInputsAreNamed) {
  auto group = solo();
  SyncBatchNorm bn(3, group);
  EXPECT_THROW(bn.forward(randn({2, 3, 4})), ShapeError);     // not 4-D
  EXPECT_THROW(bn.forward(randn({2, 4, 2, 2})), ShapeError);  // 4 channels, not 3
  EXPECT_THROW(bn.forward(Tensor()), ShapeError);
  EXPECT_THROW(SyncBatchNorm(3, nullptr), ValueError);
  EXPECT_THROW(SyncBatchNorm(0, group), ValueError);
  using parallel::sync_batch_norm;
  EXPECT_THROW(sync_batch_norm(randn({4}), {}, {}, {}, {}, 0.1, 1e-5, group), ShapeError);
  EXPECT_THROW(sync_batch_norm(randn({2, 3}), {}, {}, randn({4}), {}, 0.1, 1e-5, group),
               ShapeError);
  EXPECT_THROW(sync_batch_norm(Tensor::ones({2, 3}, DType::i64), {}, {}, {}, {}, 0.1, 1e-5, group),
               DTypeError);
  EXPECT_THROW(sync_batch_norm(randn({2, 3}), {}, {}, {}, {}, 0.1, 1e-5, nullptr), ValueError);
  EXPECT_THROW(sync_batch_norm(randn({2, 0, 3}), {}, {}, {}, {}, 0.1, 1e-5, group), ShapeError);
  try {  // one value per channel in the whole (global) batch
    sync_batch_norm(randn({1, 3, 1, 1}), {}, {}, {}, {}, 0.1, 1e-5, group, "bn7");
    ADD_FAILURE() << "a single value per channel should raise";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("bn7: expected more than 1 value per channel"),
              std::string::npos)
        << e.what();
  }
}

// ---- simulated ranks ---------------------------------------------------------

// Rank r holds samples [starts[r], starts[r] + sizes[r]) of a global batch.
// Every rank's output, input gradient and running statistics, and the sum
// over ranks of the parameter gradients, must be BatchNorm2d's on the whole
// batch, for two training steps and one eval step.
void check_ranks_match_whole_batch(const std::vector<int64_t>& sizes, DType dt,
                                   std::optional<double> momentum) {
  SCOPED_TRACE(fmt::format("sizes {} {}", fmt::join(sizes, ","), dtype_name(dt)));
  const int world = int(sizes.size());
  int64_t total = 0;
  std::vector<int64_t> starts;
  for (int64_t s : sizes) starts.push_back(total), total += s;
  const int64_t c = 3;
  manual_seed(6);
  nn::BatchNorm2d ref(c, 1e-5, momentum);
  ref.to(dt);
  auto groups = thread_groups(world);
  std::vector<std::shared_ptr<SyncBatchNorm>> mine;
  for (int r = 0; r < world; ++r) {
    mine.push_back(std::make_shared<SyncBatchNorm>(c, groups[size_t(r)], 1e-5, momentum));
    mine.back()->to(dt);
    if (r == 0)
      randomise(*mine.back(), ref, dt);
    else
      mine.back()->load_state_dict(ref.state_dict());
  }
  const double tol = tolerance(dt);
  for (bool training : {true, true, false}) {
    ref.train(training);
    ref.zero_grad();
    Tensor x = (randn({total, c, 3, 2}, dt) * 2.0 + 1.0).detach().set_requires_grad();
    Tensor dy = randn({total, c, 3, 2}, dt);
    Tensor y = ref.forward(x);
    sum(y * dy).backward();
    std::vector<Tensor> ys(sizes.size()), dxs(sizes.size());
    on_every_rank(world, [&](int r) {
      SyncBatchNorm& bn = *mine[size_t(r)];
      bn.train(training);
      bn.zero_grad();
      Tensor xr = x.detach().narrow(0, starts[size_t(r)], sizes[size_t(r)]).clone();
      xr.set_requires_grad();
      ys[size_t(r)] = bn.forward(xr);
      sum(ys[size_t(r)] * dy.narrow(0, starts[size_t(r)], sizes[size_t(r)])).backward();
      dxs[size_t(r)] = xr.grad();
    });
    Tensor dw = Tensor::zeros({c}, dt), db = Tensor::zeros({c}, dt);
    for (int r = 0; r < world; ++r) {
      SCOPED_TRACE(fmt::format("rank {} training={}", r, training));
      const int64_t s = starts[size_t(r)], n = sizes[size_t(r)];
      const SyncBatchNorm& bn = *mine[size_t(r)];
      if (n > 0) {
        EXPECT_CLOSE(ys[size_t(r)], y.narrow(0, s, n), tol);
        EXPECT_CLOSE(dxs[size_t(r)], x.grad().narrow(0, s, n), tol);
      }
      EXPECT_CLOSE(bn.running_mean, ref.running_mean, tol);
      EXPECT_CLOSE(bn.running_var, ref.running_var, tol);
      EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), ref.num_batches_tracked.item<int64_t>());
      dw = dw + bn.weight.grad();
      db = db + bn.bias.grad();
    }
    EXPECT_CLOSE(dw, ref.weight.grad(), tol);
    EXPECT_CLOSE(db, ref.bias.grad(), tol);
  }
  // One allreduce per training forward and one per backward; none in eval.
  for (auto& g : groups) EXPECT_EQ(g->allreduces.load(), 4);
}

TEST(SyncBatchNormRanks, TwoRanksUnevenMatchWholeBatch) {
  for (DType dt : {DType::f32, DType::f64}) check_ranks_match_whole_batch({3, 5}, dt, 0.1);
}

TEST(SyncBatchNormRanks, ThreeRanksOneEmptyMatchWholeBatch) {
  check_ranks_match_whole_batch({2, 0, 4}, DType::f32, 0.1);
  check_ranks_match_whole_batch({1, 1, 1}, DType::f64, std::nullopt);
}

// Activations far from zero: the variance (1) is a 1e-6 part of E[x²], so
// it is combined in f64 (Note [Synchronised batch statistics]).
TEST(SyncBatchNormRanks, LargeMeanKeepsTheVariance) {
  manual_seed(8);
  Tensor x = randn({6, 2, 4, 4}) + 1000.0;  // f32
  auto groups = thread_groups(2);
  std::vector<Tensor> running(2);
  on_every_rank(2, [&](int r) {
    SyncBatchNorm bn(2, groups[size_t(r)], 1e-5, 1.0);  // momentum 1: running = batch value
    bn.forward(x.narrow(0, 3 * r, 3));
    running[size_t(r)] = bn.running_var;
  });
  Tensor want = var(x.to(DType::f64), {0, 2, 3});  // unbiased, as the running statistic
  for (const Tensor& got : running) EXPECT_LE(scaled_error(got, want), 1e-4);
}

TEST(SyncBatchNormRanks, EvalIsLocal) {
  auto groups = thread_groups(2);
  SyncBatchNorm bn(2, groups[0]);
  nn::BatchNorm2d plain(2);
  randomise(bn, plain, DType::f32);
  bn.eval();
  plain.eval();
  Tensor x = randn({2, 2, 3, 3});
  EXPECT_EQ(max_abs_error(bn.forward(x), plain.forward(x)), 0.0);  // rank 1 never joins
  EXPECT_EQ(groups[0]->allreduces.load(), 0);
}

TEST(SyncBatchNormModule, ReprAndStateDictInterchangeWithBatchNorm2d) {
  auto group = solo();
  SyncBatchNorm bn(4, group, 1e-3, std::nullopt, true, true);
  EXPECT_NE(bn.to_string().find("momentum=None"), std::string::npos) << bn.to_string();
  EXPECT_NE(bn.to_string().find("synchronised over 1 rank(s) (threads)"), std::string::npos)
      << bn.to_string();
  nn::BatchNorm2d plain(4);
  randomise(bn, plain, DType::f32);
  set_value(plain.running_mean, Tensor::full({4}, 3.0));
  EXPECT_TRUE(bn.load_state_dict(plain.state_dict()).ok());
  EXPECT_CLOSE(bn.running_mean, Tensor::full({4}, 3.0), 0.0);
  SyncBatchNorm bare(4, group, 1e-5, 0.1, false, false);
  EXPECT_TRUE(bare.state_dict().empty());
  EXPECT_TRUE(bare.parameters().empty());
}

// ---- convert_sync_batchnorm ------------------------------------------------------

TEST(ConvertSyncBatchnorm, ConvertsEveryBatchNorm2dKeepingItsTensors) {
  auto group = solo();
  nn::Sequential model;
  auto bn0 = model.push_back(std::make_shared<nn::BatchNorm2d>(2));
  auto inner = model.push_back(std::make_shared<nn::Sequential>());
  auto bn1 = inner->push_back(std::make_shared<nn::BatchNorm2d>(2, 1e-3, 0.5));
  auto already = model.push_back(std::make_shared<SyncBatchNorm>(2, group));
  EXPECT_THROW(parallel::convert_sync_batchnorm(model, nullptr), ValueError);
  EXPECT_EQ(parallel::convert_sync_batchnorm(*inner->push_back(std::make_shared<nn::Sequential>()),
                                             group),
            0);
  Tensor w = bn1->weight;
  EXPECT_EQ(parallel::convert_sync_batchnorm(model, group), 2);
  EXPECT_TRUE(bn1->weight.is_same(w));  // the same tensors
  Tensor x = randn({3, 2, 2, 2});
  model.forward(x);
  EXPECT_EQ(group->allreduces.load(), 0);  // world size 1: BatchNorm2d itself
}

// The point of converting in place: ResNet calls its BatchNorm2d members
// directly, and after the conversion two ranks with half a batch each get
// the gradients and running statistics of the whole batch.
TEST(ConvertSyncBatchnorm, ResNetOnTwoRanksMatchesWholeBatch) {
  auto make = [] {
    manual_seed(3);
    return nn::models::resnet20({.in_channels = 1, .num_classes = 4});
  };
  auto ref = make();
  std::vector<std::shared_ptr<nn::models::ResNet>> mine{make(), make()};
  int64_t bn_layers = 0;
  for (nn::Module* m : ref->modules()) bn_layers += dynamic_cast<nn::BatchNorm2d*>(m) != nullptr;
  auto groups = thread_groups(2);
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(parallel::convert_sync_batchnorm(*mine[size_t(r)], groups[size_t(r)]), bn_layers);
  Tensor x = randn({6, 1, 8, 8}), dy = randn({6, 4});
  sum(ref->forward(x) * dy).backward();
  on_every_rank(2, [&](int r) {
    sum(mine[size_t(r)]->forward(x.narrow(0, 3 * r, 3)) * dy.narrow(0, 3 * r, 3)).backward();
  });
  auto want = ref->named_parameters();
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string& name = want.items()[i].first;
    Tensor got = mine[0]->parameter(name).grad() + mine[1]->parameter(name).grad();
    EXPECT_LE(scaled_error(got, want.items()[i].second.grad(), 1e-6), 1e-5) << name;
  }
  for (const auto& [name, buffer] : ref->named_buffers())
    EXPECT_LE(scaled_error(mine[1]->buffer(name), buffer, 1e-6), 1e-5) << name;
  // One allreduce per layer forward and one per layer backward.
  EXPECT_EQ(groups[0]->allreduces.load(), 2 * bn_layers);
}

}  // namespace
}  // namespace ddp::test
