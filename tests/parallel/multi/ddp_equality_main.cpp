// DistributedDataParallel gives the gradients of one big batch:
//   mpirun -np N ddp_equality_main --backend mpi
//   ddprun --nproc-per-node N ddp_equality_main --backend gloo
// Every rank also trains a reference copy of the model on the whole global
// batch in one process, and after every backward the DDP gradients (this
// rank's slice of the batch, averaged across ranks) must match the
// reference's, as must the parameters after the optimizer steps.

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "ddp/amp/grad_scaler.h"
#include "ddp/dist/init.h"
#include "ddp/nn/container.h"
#include "ddp/nn/conv.h"
#include "ddp/nn/flatten.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/layout_conversions.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/linear.h"
#include "ddp/nn/models/gpt.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/join.h"
#include "ddp/parallel/powersgd.h"
#include "ddp/parallel/sync_batch_norm.h"
#include "ddp/tensor/dense_layout.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "dist/multi_rank_main.h"
#include "nn/scaled_error.h"

using namespace ddp;
using parallel::DDPOptions;
using parallel::DistributedDataParallel;

namespace {

dist::World g_world;
int rank() { return g_world.rank(); }
int world() { return g_world.size(); }

constexpr int64_t kBatch = 12;  // divisible by 2, 3 and 4 ranks
// Relative to each tensor's scale: f32, and f64.
double tolerance(DType t) { return t == DType::f64 ? 1e-10 : 1e-5; }

// Note [ResNet trajectories in f64]
// In f32, DDP's averaged gradient differs from the one-process gradient in
// the last bits, so after an optimizer step the two models' weights differ
// by ~1e-7. A ReLU whose input lies within that of zero can then switch on
// one side only, changing the gradients of every layer below it by far more
// than 1e-5 (seen at 2 and 4 ranks, step 2 of the no_sync run: 1.7e-3 on
// conv1.weight, while the same run in f64 agrees to 1e-10). So the f32
// ResNet runs compare one step from identical weights, and the multi-step
// ResNet trajectories run in f64 (tolerance 1e-10). GPT has no ReLU (GELU
// is smooth), so its f32 trajectories are compared over every step.

// This rank's rows of a global batch.
Tensor my_rows(const Tensor& t) {
  const int64_t n = t.size(0) / world();
  return t.narrow(0, rank() * n, n);
}

// A deterministic global batch for one step, the same on every rank.
struct Batch {
  Tensor x, y;
};
using MakeBatch = std::function<Batch(int step)>;

Batch image_batch(int step) {
  Generator gen(1000 + uint64_t(step));
  Tensor x = randn({kBatch, 1, 8, 8}, {}, &gen);
  Tensor y = mul(rand({kBatch}, {}, &gen), 9.999).to(DType::i64);
  return {x, y};
}

constexpr int64_t kVocab = 64, kSeq = 16;
Batch token_batch(int step) {
  Generator gen(2000 + uint64_t(step));
  Tensor x = mul(rand({kBatch, kSeq}, {}, &gen), kVocab - 0.001).to(DType::i64);
  Tensor y = mul(rand({kBatch, kSeq}, {}, &gen), kVocab - 0.001).to(DType::i64);
  return {x, y};
}

std::shared_ptr<nn::models::ResNet> small_resnet() {
  manual_seed(7);
  auto m = nn::models::resnet20({.in_channels = 1, .num_classes = 10});
  // Eval-mode BatchNorm normalises each sample on its own, so N slices of a
  // batch give the gradients of the whole batch (train-mode BatchNorm needs
  // SyncBatchNorm for that).
  m->eval();
  return m;
}

std::shared_ptr<nn::models::ResNet> small_resnet_f64() {
  auto m = small_resnet();
  m->to(DType::f64);
  return m;
}

Batch image_batch_f64(int step) {
  Batch b = image_batch(step);
  return {b.x.to(DType::f64), b.y};
}

std::shared_ptr<nn::models::GPT> small_gpt() {
  manual_seed(7);
  nn::models::GPTConfig c;
  c.vocab_size = kVocab;
  c.block_size = kSeq;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  return std::make_shared<nn::models::GPT>(c);
}

Tensor loss_of(const Tensor& out, const Tensor& y) {
  if (out.dim() == 3) return nn::functional::cross_entropy(out.reshape({-1, kVocab}), y.reshape({-1}));
  return nn::functional::cross_entropy(out, y);
}

// Ranks other than 0 start from different weights, so the broadcast at
// construction is tested too.
void perturb_unless_rank0(nn::Module& m) {
  if (rank() == 0) return;
  NoGradGuard no_grad;
  for (Tensor p : m.parameters()) p.add_(Tensor::full(p.shape(), 0.01 * rank(), p.dtype()));
}

void expect_grads_match(nn::Module& got, nn::Module& want, const std::string& where) {
  auto g = got.named_parameters();
  auto w = want.named_parameters();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const auto& [name, p] = g.items()[i];
    const Tensor& q = w.items()[i].second;
    ASSERT_EQ(p.grad().defined(), q.grad().defined()) << where << " " << name;
    if (!q.grad().defined()) continue;
    EXPECT_LE(test::scaled_error(p.grad(), q.grad(), 1e-12), tolerance(p.dtype()))
        << where << " grad of " << name;
  }
}

void expect_params_match(nn::Module& got, nn::Module& want, const std::string& where) {
  auto g = got.named_parameters();
  auto w = want.named_parameters();
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_LE(test::scaled_error(g.items()[i].second, w.items()[i].second, 1e-12),
              tolerance(g.items()[i].second.dtype()))
        << where << " " << g.items()[i].first;
}

template <class M>
void train_side_by_side(std::function<std::shared_ptr<M>()> make, const MakeBatch& batch,
                        DDPOptions opts, int steps, int micro = 1,
                        std::function<void(M&)> adapt_mine = nullptr) {
  auto ref = make();
  auto mine = make();
  if (adapt_mine) adapt_mine(*mine);
  perturb_unless_rank0(*mine);
  DistributedDataParallel<M> ddp_model(mine, g_world.group, opts);
  expect_params_match(*mine, *ref, "after construction");
  optim::SGD opt_ref(ref->parameters(), 0.05, {.momentum = 0.9, .weight_decay = 1e-4});
  optim::SGD opt(mine->parameters(), 0.05, {.momentum = 0.9, .weight_decay = 1e-4});
  for (int s = 0; s < steps; ++s) {
    for (int m = 0; m < micro; ++m) {
      Batch b = batch(s * micro + m);
      loss_of(ref->forward(b.x), b.y).backward();
      if (m + 1 < micro) {
        auto guard = ddp_model.no_sync();
        loss_of(ddp_model(my_rows(b.x)), my_rows(b.y)).backward();
      } else {
        loss_of(ddp_model(my_rows(b.x)), my_rows(b.y)).backward();
      }
    }
    expect_grads_match(*mine, *ref, "step " + std::to_string(s));
    opt_ref.step();
    opt.step();
    opt_ref.zero_grad();
    opt.zero_grad();
  }
  expect_params_match(*mine, *ref, "after training");
}

TEST(DDPEquality, ResNet20) {
  // See Note [ResNet trajectories in f64].
  train_side_by_side<nn::models::ResNet>(small_resnet, image_batch, {}, 1);
  train_side_by_side<nn::models::ResNet>(small_resnet_f64, image_batch_f64, {}, 5);
}

TEST(DDPEquality, ResNet20ManySmallBuckets) {
  DDPOptions o;
  o.bucket_cap_mb = 0.01;
  train_side_by_side<nn::models::ResNet>(small_resnet, image_batch, o, 1);
  train_side_by_side<nn::models::ResNet>(small_resnet_f64, image_batch_f64, o, 3);
}

// Train-mode BatchNorm normalises with batch statistics, so N ranks match
// one process only when the statistics are taken over the global batch:
// SyncBatchNorm. Gradients and running statistics both follow the whole batch.
TEST(DDPEquality, ResNet20TrainModeWithSyncBatchNorm) {
  auto make = [] {
    auto m = small_resnet_f64();
    m->train();
    return m;
  };
  auto sync = [](nn::models::ResNet& m) { parallel::convert_sync_batchnorm(m, g_world.group); };
  train_side_by_side<nn::models::ResNet>(make, image_batch_f64, {}, 3, 1, sync);
}

TEST(DDPEquality, GPT) { train_side_by_side<nn::models::GPT>(small_gpt, token_batch, {}, 5); }

TEST(DDPEquality, GPTManySmallBuckets) {
  DDPOptions o;
  o.bucket_cap_mb = 0.01;
  train_side_by_side<nn::models::GPT>(small_gpt, token_batch, o, 5);
}

TEST(DDPEquality, NoSyncAccumulatesFourMicroBatches) {
  train_side_by_side<nn::models::ResNet>(small_resnet, image_batch, {}, 1, 4);
  train_side_by_side<nn::models::ResNet>(small_resnet_f64, image_batch_f64, {}, 2, 4);
  train_side_by_side<nn::models::GPT>(small_gpt, token_batch, {}, 3, 4);
}

// A model whose head_b is used on even steps only (by every rank) and whose
// extra head is used by one rank per step.
class Branchy : public nn::Module {
 public:
  Branchy() : nn::Module("Branchy") {
    trunk = register_module("trunk", std::make_shared<nn::Linear>(8, 16));
    head_a = register_module("head_a", std::make_shared<nn::Linear>(16, 4));
    head_b = register_module("head_b", std::make_shared<nn::Linear>(16, 4));
    extra = register_module("extra", std::make_shared<nn::Linear>(16, 4));
  }
  Tensor forward(const Tensor& x, bool use_b, bool use_extra) {
    Tensor h = relu(trunk->forward(x));
    Tensor out = head_a->forward(h);
    if (use_b) out = out + head_b->forward(h);
    if (use_extra) out = out + extra->forward(h);
    return out;
  }
  std::shared_ptr<nn::Linear> trunk, head_a, head_b, extra;
};

TEST(DDPEquality, UnusedParametersWithFindUnused) {
  manual_seed(11);
  auto ref = std::make_shared<Branchy>();
  manual_seed(11);
  auto mine = std::make_shared<Branchy>();
  DDPOptions o;
  o.find_unused_parameters = true;
  o.bucket_cap_mb = 0.0005;  // a few parameters per bucket
  DistributedDataParallel<Branchy> ddp_model(mine, g_world.group, o);
  optim::SGD opt_ref(ref->parameters(), 0.1, {.momentum = 0.9, .weight_decay = 1e-3});
  optim::SGD opt(mine->parameters(), 0.1, {.momentum = 0.9, .weight_decay = 1e-3});
  const int64_t per_rank = 3;
  for (int s = 0; s < 6; ++s) {
    Generator gen(3000 + uint64_t(s));
    Tensor x = randn({per_rank * world(), 8}, {}, &gen);
    Tensor y = randn({per_rank * world(), 4}, {}, &gen);
    const bool use_b = s % 2 == 0;
    const int extra_rank = s % world();
    // The reference: every rank's slice with that rank's choice, losses
    // averaged over ranks, in one process.
    Tensor ref_loss;
    for (int r = 0; r < world(); ++r) {
      Tensor l = nn::functional::mse_loss(
          ref->forward(x.narrow(0, r * per_rank, per_rank), use_b, r == extra_rank),
          y.narrow(0, r * per_rank, per_rank));
      ref_loss = ref_loss.defined() ? ref_loss + l : l;
    }
    (ref_loss / double(world())).backward();
    Tensor out = ddp_model(x.narrow(0, rank() * per_rank, per_rank), use_b, rank() == extra_rank);
    nn::functional::mse_loss(out, y.narrow(0, rank() * per_rank, per_rank)).backward();
    expect_grads_match(*mine, *ref, "step " + std::to_string(s));
    EXPECT_EQ(mine->head_b->weight.grad().defined(), use_b);
    opt_ref.step();
    opt.step();
    opt_ref.zero_grad();
    opt.zero_grad();
  }
  expect_params_match(*mine, *ref, "after training");
}

// Note [Join]: rank r has r + 2 batches. Ranks that ran out shadow the
// others' collectives; every iteration's gradient is the sum over the ranks
// that still had a batch divided by the world size, as PyTorch's default.
// A GradScaler (an exact power-of-two scale in f64) steps as usual.
TEST(DDPJoin, UnevenInputsEndWithTheOneProcessParameters) {
  auto make = [] {
    manual_seed(21);
    auto m = std::make_shared<nn::Linear>(5, 3);
    m->to(DType::f64);
    return m;
  };
  auto batch = [](int r, int step) {
    Generator gen(7000 + uint64_t(100 * r + step));
    return randn({4, 5}, DType::f64, &gen);
  };
  auto ref = make();
  optim::SGD opt_ref(ref->parameters(), 0.1);
  const int steps = world() + 1;
  for (int s = 0; s < steps; ++s) {
    opt_ref.zero_grad();
    Tensor total;
    for (int r = 0; r < world(); ++r) {
      if (s >= r + 2) continue;
      Tensor l = sum(ref->forward(batch(r, s)));
      total = total.defined() ? total + l : l;
    }
    (total / double(world())).backward();
    opt_ref.step();
  }
  auto mine = make();
  DistributedDataParallel<nn::Linear> ddp_model(
      mine, g_world.group, {.bucket_cap_mb = 1e-4, .find_unused_parameters = true});
  optim::SGD opt(mine->parameters(), 0.1);
  amp::GradScaler scaler({.init_scale = 1024, .growth_interval = 1000});
  parallel::Join join({&ddp_model});
  int taken = 0;
  join.run([&] {
    for (int s = 0; s < rank() + 2; ++s) {
      opt.zero_grad();
      scaler.scale(sum(ddp_model(batch(rank(), s)))).backward();
      taken += scaler.step(opt);
      scaler.update();
    }
  });
  EXPECT_EQ(taken, rank() + 2);
  expect_params_match(*mine, *ref, "after the join");
}

// A GradScaler after DDP sees averaged gradients: an overflow on one rank
// is an overflow on every rank, so all ranks skip the step and back off
// together, and the next finite step is taken everywhere.
TEST(DDPWithGradScaler, EveryRankMakesTheSameSkipDecision) {
  auto model = small_gpt();
  DistributedDataParallel<nn::models::GPT> ddp_model(model, g_world.group, {.bucket_cap_mb = 0.05});
  optim::SGD opt(model->parameters(), 0.05);
  amp::GradScaler scaler({.init_scale = 1024, .growth_interval = 1});
  Tensor before = model->parameters()[0].clone();
  Batch b = token_batch(0);
  const int overflowing_rank = world() - 1;
  Tensor loss = loss_of(ddp_model(my_rows(b.x)), my_rows(b.y));
  if (rank() == overflowing_rank) loss = loss * INFINITY;
  scaler.scale(loss).backward();
  EXPECT_FALSE(scaler.step(opt));  // on every rank, not just the overflowing one
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 512);
  EXPECT_EQ(model->parameters()[0].to_vector<float>(), before.to_vector<float>());
  opt.zero_grad();
  loss_of(ddp_model(my_rows(b.x)), my_rows(b.y));  // a forward without backward is fine
  scaler.scale(loss_of(ddp_model(my_rows(b.x)), my_rows(b.y))).backward();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1024);
}

TEST(DDPErrors, MissingGradientWithoutFindUnusedIsAnErrorNamingIt) {
  manual_seed(11);
  auto mine = std::make_shared<Branchy>();
  DistributedDataParallel<Branchy> ddp_model(mine, g_world.group, {});
  Tensor x = randn({2, 8});
  // head_b and extra get no gradient on any rank.
  sum(ddp_model(x, false, false)).backward();
  try {
    ddp_model(x, true, true);
    ADD_FAILURE() << "the next forward should have raised";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'head_b.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'extra.bias'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("find_unused_parameters"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("'trunk.weight'"), std::string::npos) << msg;
  }
  // After the error the model is usable again.
  sum(ddp_model(x, true, true)).backward();
  EXPECT_TRUE(mine->extra->weight.grad().defined());
}

TEST(DDPErrors, DifferentModelsOnDifferentRanksAreNamed) {
  const int64_t width = rank() == world() - 1 ? 5 : 4;
  auto m = std::make_shared<nn::Linear>(3, width);
  try {
    DistributedDataParallel<nn::Linear> ddp_model(m, g_world.group, {});
    ADD_FAILURE() << "construction should have raised";
  } catch (const ValueError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(fmt::format("rank {} has 'weight' [5, 3]", world() - 1)), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("rank 0 has 'weight' [4, 3]"), std::string::npos) << msg;
  }
}

// After many steps on different data, every rank holds bit-identical
// parameters: a checksum of their bytes is the same on all ranks.
// ---- channels-last models ---------------------------------------------------------

// p has the strides Module::to(MemoryFormat::channels_last) gives a 4-D
// tensor (a 1x1 kernel counts as NCHW for is_channels_last, but is re-laid).
bool laid_out_channels_last(const Tensor& p) {
  return p.dim() == 4 && p.strides() == nn::functional::to_channels_last(p.detach()).strides();
}

// 3-channel images (a 1-channel NHWC tensor is also NCHW), f64 or f32.
Batch rgb_batch(int step, DType dt) {
  Generator gen(3000 + uint64_t(step));
  Tensor x = randn({kBatch, 3, 8, 8}, {}, &gen).to(dt);
  Tensor y = mul(rand({kBatch}, {}, &gen), 9.999).to(DType::i64);
  return {x, y};
}

std::shared_ptr<nn::models::ResNet> rgb_resnet20(DType dt) {
  manual_seed(7);
  auto m = nn::models::resnet20({.in_channels = 3, .num_classes = 10});
  m->eval();  // see small_resnet()
  m->to(dt);
  return m;
}

// Two bottleneck blocks (1x1, 3x3, 1x1 convolutions and a strided
// projection shortcut), as in ResNet-50, at a size a CI machine trains.
std::shared_ptr<nn::Sequential> bottleneck_stack(DType dt) {
  using nn::models::Bottleneck;
  manual_seed(11);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Conv2d>(3, 16, 3, 1, 1, 1, 1, false),
      std::make_shared<Bottleneck>(16, 4, 1), std::make_shared<Bottleneck>(16, 8, 2),
      std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(8 * Bottleneck::kExpansion, 10)});
  m->eval();
  m->to(dt);
  return m;
}

// Note [Channels-last DDP equality]
// The same model twice under DDP on the same ranks: once contiguous fed
// NCHW, once channels-last fed NHWC. Every step their averaged gradients
// and then their parameters must agree (the convolutions sum in the same
// order in both layouts; only the allreduce may split the two buckets'
// elements differently), the channels-last model's .grad must be its
// bucket views in the parameters' own layout (after the first step, whose
// fresh gradients move into the buckets once, no gradient is copied:
// zero_grad(false) keeps the views), and its whole step (forward, backward with the bucket
// allreduces, optimizer step) must convert no layout.
template <class M>
void channels_last_equals_contiguous(std::function<std::shared_ptr<M>(DType)> make, DType dt,
                                     DDPOptions opts, int steps, bool count_conversions) {
  SCOPED_TRACE(fmt::format("{} steps in {}", steps, dtype_name(dt)));
  auto ref = make(dt);
  auto mine = make(dt);
  mine->to(MemoryFormat::channels_last);
  perturb_unless_rank0(*ref);
  perturb_unless_rank0(*mine);
  DistributedDataParallel<M> ddp_ref(ref, g_world.group, opts);
  DistributedDataParallel<M> ddp_mine(mine, g_world.group, opts);
  int four_d = 0;
  for (const Tensor& p : mine->parameters())
    if (p.dim() == 4) {
      ++four_d;
      ASSERT_TRUE(laid_out_channels_last(p)) << p.describe();
    }
  ASSERT_GT(four_d, 0);
  expect_params_match(*mine, *ref, "after construction");
  optim::SGD opt_ref(ref->parameters(), 0.05, {.momentum = 0.9, .weight_decay = 1e-4});
  optim::SGD opt(mine->parameters(), 0.05, {.momentum = 0.9, .weight_decay = 1e-4});
  uint64_t copies_after_first_step = 0;
  for (int s = 0; s < steps; ++s) {
    const std::string where = "step " + std::to_string(s);
    Batch b = rgb_batch(s, dt);
    loss_of(ddp_ref(my_rows(b.x)), my_rows(b.y)).backward();
    Tensor x = nn::functional::to_channels_last(my_rows(b.x));
    const int64_t conversions = nn::functional::layout_conversion_count();
    loss_of(ddp_mine(x), my_rows(b.y)).backward();
    expect_grads_match(*mine, *ref, where);
    for (const auto& [name, p] : mine->named_parameters())
      EXPECT_TRUE(same_dense_layout(p.grad(), p)) << where << " grad of " << name << " has strides "
                                                  << fmt::format("{}", fmt::join(p.grad().strides(), ","));
    opt.step();
    if (count_conversions)
      EXPECT_EQ(nn::functional::layout_conversion_count() - conversions, 0) << where;
    opt_ref.step();
    opt_ref.zero_grad(false);
    opt.zero_grad(false);
    if (s == 0) copies_after_first_step = ddp_mine.reducer().grad_copies();
  }
  expect_params_match(*mine, *ref, "after training");
  EXPECT_LE(copies_after_first_step, mine->parameters().size());
  EXPECT_EQ(ddp_mine.reducer().grad_copies(), copies_after_first_step);
  for (const Tensor& p : mine->parameters())
    if (p.dim() == 4) EXPECT_TRUE(laid_out_channels_last(p)) << p.describe();
}

TEST(DDPChannelsLast, ResNet20EqualsContiguous) {
  // f64 over several steps (Note [ResNet trajectories in f64]); f32 for one
  // step, through oneDNN, where a layout change would be counted.
  channels_last_equals_contiguous<nn::models::ResNet>(rgb_resnet20, DType::f64, {}, 3, false);
  channels_last_equals_contiguous<nn::models::ResNet>(rgb_resnet20, DType::f32, {}, 1, true);
}

TEST(DDPChannelsLast, BottleneckStackEqualsContiguousInSmallBuckets) {
  DDPOptions o;
  o.bucket_cap_mb = 0.005;  // several buckets, weights split across them
  channels_last_equals_contiguous<nn::Sequential>(bottleneck_stack, DType::f64, o, 3, false);
  channels_last_equals_contiguous<nn::Sequential>(bottleneck_stack, DType::f32, o, 1, true);
}

// A rank whose model is laid out differently is named at construction:
// buckets and broadcasts move bytes as they lie.
TEST(DDPChannelsLast, DifferentLayoutsOnDifferentRanksAreNamed) {
  auto m = rgb_resnet20(DType::f32);
  if (rank() == world() - 1) m->to(MemoryFormat::channels_last);
  try {
    DistributedDataParallel<nn::models::ResNet> ddp_model(m, g_world.group, {});
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("strides"), std::string::npos) << e.what();
  }
}

// PowerSGD compresses a channels-last weight's gradient as the rows of its
// block: the gradients keep their layout, the exactly summed ones (biases,
// BatchNorm) equal the plain average, the compressed ones approximate it,
// and every rank ends with the same gradients.
TEST(DDPChannelsLast, PowerSGDCompressesChannelsLastGradients) {
  auto ref = rgb_resnet20(DType::f32);
  auto mine = rgb_resnet20(DType::f32);
  mine->to(MemoryFormat::channels_last);
  DistributedDataParallel<nn::models::ResNet> ref_ddp(ref, g_world.group, {});
  DistributedDataParallel<nn::models::ResNet> ddp_model(mine, g_world.group, {});
  auto state = std::make_shared<parallel::PowerSGDState>(
      parallel::PowerSGDOptions{.matrix_approximation_rank = 4,
                                .start_powerSGD_iter = 0,
                                .min_compression_rate = 1.0,
                                .use_error_feedback = false,
                                .warm_start = false});
  ddp_model.register_comm_hook(parallel::powersgd_hook(state));
  Batch b = rgb_batch(0, DType::f32);
  loss_of(ref_ddp(my_rows(b.x)), my_rows(b.y)).backward();
  loss_of(ddp_model(nn::functional::to_channels_last(my_rows(b.x))), my_rows(b.y)).backward();
  EXPECT_GT(state->numel_before_compression(), 0);  // the convolutions were compressed
  auto g = mine->named_parameters();
  auto w = ref->named_parameters();
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the gradients' bytes
  for (size_t i = 0; i < g.size(); ++i) {
    const std::string& name = g.items()[i].first;
    const Tensor& p = g.items()[i].second;
    EXPECT_TRUE(same_dense_layout(p.grad(), p)) << name;
    const double err = test::scaled_error(p.grad(), w.items()[i].second.grad(), 1e-12);
    if (p.dim() == 1)
      EXPECT_LE(err, 1e-5) << name;  // summed exactly
    else
      EXPECT_LT(err, 1.0) << name;  // a rank-4 approximation
    Tensor c = p.grad().contiguous();
    auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t k = 0; k < c.nbytes(); ++k) h = (h ^ bytes[k]) * 1099511628211ull;
  }
  Tensors all;
  for (int r = 0; r < world(); ++r) all.push_back(Tensor::empty({1}, DType::i64));
  g_world.group->allgather(all, Tensor::from_vector(std::vector<int64_t>{int64_t(h)}, {1}))
      ->wait(std::chrono::milliseconds(60'000));
  for (int r = 1; r < world(); ++r)
    EXPECT_EQ(all[size_t(r)].item<int64_t>(), all[0].item<int64_t>()) << "rank " << r;
}

TEST(DDPConsistency, ParametersStayIdenticalAcrossRanks) {
  auto model = small_gpt();
  DistributedDataParallel<nn::models::GPT> ddp_model(model, g_world.group, {.bucket_cap_mb = 0.05});
  optim::SGD opt(model->parameters(), 0.05, {.momentum = 0.9});
  for (int s = 0; s < 20; ++s) {
    Batch b = token_batch(100 * rank() + s);  // each rank its own data
    loss_of(ddp_model(my_rows(b.x)), my_rows(b.y)).backward();
    opt.step();
    opt.zero_grad();
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the parameter bytes
  for (const Tensor& p : model->parameters()) {
    Tensor c = p.contiguous();
    auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  Tensors all;
  for (int r = 0; r < world(); ++r) all.push_back(Tensor::empty({1}, DType::i64));
  Tensor mine = Tensor::from_vector(std::vector<int64_t>{int64_t(h)}, {1});
  g_world.group->allgather(all, mine)->wait(std::chrono::milliseconds(60'000));
  for (int r = 1; r < world(); ++r)
    EXPECT_EQ(all[size_t(r)].item<int64_t>(), all[0].item<int64_t>()) << "rank " << r;
}

// Note [Overlapped step] and Note [Overlap chunks] in a real multi-process
// job, on mpi and gloo at 2 to 4 ranks: f64 parameters of the overlapped
// step (whole buckets with 3 priority buckets, then chunks that do not
// divide the buckets, part of them held back) equal plain DDP's after every
// step to 1e-12 (chunks change the messages' sizes, and with them an
// MPI_Allreduce's algorithm and order of sums at 3 ranks or more).
TEST(DDPOverlap, ResNetF64EqualsPlainDdpAfterEveryStep) {
  for (parallel::OverlapChunks chunks :
       {parallel::OverlapChunks{}, parallel::OverlapChunks{.chunk_mb = 0.004, .issue_ratio = 0.7}}) {
    SCOPED_TRACE(::testing::Message() << "chunk_mb " << chunks.chunk_mb);
    auto plain = small_resnet_f64();
    auto over = small_resnet_f64();
    DDPOptions o;
    o.bucket_cap_mb = 0.01;
    DistributedDataParallel<nn::models::ResNet> ddp_plain(plain, g_world.group, o);
    DistributedDataParallel<nn::models::ResNet> ddp_over(over, g_world.group, o);
    const optim::SGDOptions sgd{.momentum = 0.9, .weight_decay = 1e-4};
    optim::SGD opt_plain(plain->parameters(), 0.05, sgd), opt_over(over->parameters(), 0.05, sgd);
    ddp_over.overlap_step(opt_over, 3, chunks);
    for (int s = 0; s < 3; ++s) {
      Batch b = image_batch_f64(s);
      loss_of(ddp_plain(my_rows(b.x)), my_rows(b.y)).backward();
      opt_plain.step();
      opt_plain.zero_grad();
      loss_of(ddp_over(my_rows(b.x)), my_rows(b.y)).backward();
      const bool pending = ddp_over.reducer().overlap_pending();
      opt_over.step();
      opt_over.zero_grad();
      ddp_over.synchronize_step();  // read the parameters: what the step gave them
      if (s > 0) EXPECT_TRUE(pending) << "step " << s << ": the backward waited for its buckets";
      const Tensors p = plain->parameters(), q = over->parameters();
      ASSERT_EQ(p.size(), q.size());
      for (size_t i = 0; i < p.size(); ++i)
        EXPECT_LE(test::scaled_error(q[i], p[i], 1e-12), 1e-12) << "step " << s << " parameter " << i;
    }
  }
}

TEST(DDPHooks, CompressionHooksStayCloseAndUserHooksSeeEveryBucket) {
  for (auto hook : {parallel::fp16_compress_hook, parallel::bf16_compress_hook}) {
    auto ref = small_gpt();
    auto mine = small_gpt();
    DistributedDataParallel<nn::models::GPT> ddp_model(mine, g_world.group, {.bucket_cap_mb = 0.05});
    ddp_model.register_comm_hook(hook);
    Batch b = token_batch(0);
    loss_of(ref->forward(b.x), b.y).backward();
    loss_of(ddp_model(my_rows(b.x)), my_rows(b.y)).backward();
    auto g = mine->named_parameters();
    auto w = ref->named_parameters();
    for (size_t i = 0; i < g.size(); ++i)  // bf16 keeps 8 bits of mantissa
      EXPECT_LE(test::scaled_error(g.items()[i].second.grad(), w.items()[i].second.grad(), 1e-12),
                2e-2)
          << g.items()[i].first;
  }
  auto model = small_gpt();
  DistributedDataParallel<nn::models::GPT> ddp_model(model, g_world.group, {.bucket_cap_mb = 0.05});
  std::vector<int> seen;
  int lasts = 0;
  ddp_model.register_comm_hook([&](dist::ProcessGroup& g, parallel::GradBucket& bucket) {
    seen.push_back(bucket.index);
    lasts += bucket.is_last;
    EXPECT_EQ(bucket.parameters.size(), bucket.gradients.size());
    return parallel::allreduce_hook(g, bucket);
  });
  Batch b = token_batch(0);
  loss_of(ddp_model(my_rows(b.x)), my_rows(b.y)).backward();
  ASSERT_EQ(seen.size(), ddp_model.reducer().num_buckets());
  for (size_t k = 0; k < seen.size(); ++k) EXPECT_EQ(seen[k], int(k));
  EXPECT_EQ(lasts, 1);
}

}  // namespace

int main(int argc, char** argv) {
  g_world = test::init_test_world(argc, argv);
  return test::run_tests_on_every_rank(g_world, "ddp_equality_main");
}
