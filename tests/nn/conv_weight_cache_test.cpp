// Note [oneDNN weight cache]: a CPU convolution reuses its weight's blocked
// copy while the weight is unwritten, rebuilds it after every counted write
// (Note [Tensor version counter]), and frees it with the weight. Every
// result is compared bit for bit with a convolution on a fresh copy of the
// weight (new storage, so nothing cached), which runs the same primitive.
#include <gtest/gtest.h>

#include <memory>

#include "ddp/autograd/grad_mode.h"
#include "ddp/config.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/ops.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

// 32 channels: oneDNN's direct kernels want a blocked weight on every x86
// ISA it has one for, so each weight pass reorders (or reuses) it.
constexpr int64_t kC = 32;

class ConvWeightCache : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DDP_HAVE_DNNL) GTEST_SKIP() << "built without oneDNN";
    const char* env = std::getenv("DDP_CONV_WEIGHT_CACHE");
    if (env && std::string(env) == "0") GTEST_SKIP() << "DDP_CONV_WEIGHT_CACHE=0";
  }
  static F::ConvCacheStats stats() { return F::conv2d_cache_stats(DeviceType::CPU); }
  static Tensor input() { return to_channels_last(randn({2, kC, 6, 6})); }
  static Tensor weight() { return to_channels_last(mul(randn({kC, kC, 3, 3}), 0.1)); }
  static Tensor conv(const Tensor& x, const Tensor& w) {
    return F::conv2d(x, w, Tensor(), {.padding = 1});
  }
  static Tensor fresh(const Tensor& w) { return to_channels_last(w.clone()); }
  static void expect_same(const Tensor& a, const Tensor& b) {
    EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  }
  static Tensor to_channels_last(const Tensor& t) { return F::to_channels_last(t); }
};

TEST_F(ConvWeightCache, AnUnwrittenWeightIsReorderedOnce) {
  autograd::NoGradGuard no_grad;
  Tensor x = input(), w = weight();
  const auto s0 = stats();
  Tensor y0 = conv(x, w);
  const auto s1 = stats();
  EXPECT_EQ(s1.weight_misses, s0.weight_misses + 1);
  EXPECT_EQ(s1.weight_hits, s0.weight_hits);
  for (int i = 0; i < 3; ++i) expect_same(conv(x, w), y0);
  const auto s2 = stats();
  EXPECT_EQ(s2.weight_misses, s1.weight_misses);
  EXPECT_EQ(s2.weight_hits, s1.weight_hits + 3);
  expect_same(y0, conv(x, fresh(w)));
}

TEST_F(ConvWeightCache, EveryCountedWriteRebuildsTheCopy) {
  Tensor x = input(), w = weight();
  autograd::NoGradGuard no_grad;
  conv(x, w);
  // Each kind of counted write, then a convolution that must see it.
  const std::vector<std::pair<const char*, std::function<void()>>> writes = {
      {"add_", [&] { w.add_(ones_like(w), 0.01); }},
      {"mul_", [&] { w.mul_(0.5); }},
      {"copy_", [&] { w.copy_(weight()); }},
      {"fill_ of a view", [&] { w.narrow(0, 3, 1).fill_(0.25); }},
      {"normal_", [&] { normal_(w, 0, 0.1); }},
      {"bump_version after a raw write", [&] {
         w.data<float>()[0] += 1.0f;
         w.bump_version();
       }},
  };
  for (const auto& [name, write] : writes) {
    SCOPED_TRACE(name);
    const auto before = stats();
    write();
    Tensor y = conv(x, w);
    EXPECT_EQ(stats().weight_misses, before.weight_misses + 1) << name;
    expect_same(y, conv(x, fresh(w)));
  }
}

// Forward, backward-data and the optimizer step, as in training: the two
// passes keep one copy each; after the step both are rebuilt, and a second
// forward/backward with no step between (gradient accumulation) reuses
// both. The trajectory equals one that convolves a fresh tensor (a new
// storage, so no copy survives from the step before) each step.
TEST_F(ConvWeightCache, TrainingStepsEqualUncachedOnes) {
  Tensor x = input().set_requires_grad();
  Tensor w = weight().set_requires_grad();
  Tensor w_ref = fresh(w.detach()).set_requires_grad();
  optim::SGD opt(Tensors{w}, 0.1, {.momentum = 0.9});
  optim::SGD opt_ref(Tensors{w_ref}, 0.1, {.momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    const auto before = stats();
    for (int micro = 0; micro < 2; ++micro) sum(mul(conv(x, w), conv(x, w))).backward();
    const auto after = stats();
    // Micro-step 1: forward (twice: the second is a hit) and backward-data
    // (twice: the second is a hit) miss once each; micro-step 2: all hits.
    EXPECT_EQ(after.weight_misses - before.weight_misses, 2) << "step " << step;
    EXPECT_EQ(after.weight_hits - before.weight_hits, 6) << "step " << step;
    Tensor fresh_w;
    {
      autograd::NoGradGuard no_grad;
      fresh_w = fresh(w_ref).set_requires_grad();
    }
    for (int micro = 0; micro < 2; ++micro)
      sum(mul(conv(x, fresh_w), conv(x, fresh_w))).backward();
    w_ref.set_grad(fresh_w.grad());
    opt.step();
    opt_ref.step();
    opt.zero_grad();
    opt_ref.zero_grad();
    expect_same(w, w_ref);
  }
}

TEST_F(ConvWeightCache, ViewsOfOneStorageKeepTheirOwnCopies) {
  autograd::NoGradGuard no_grad;
  Tensor x = input();
  Tensor both = mul(randn({2 * kC, kC, 3, 3}), 0.1);  // two contiguous weights in one storage
  Tensor a = both.narrow(0, 0, kC), b = both.narrow(0, kC, kC);
  Tensor ya = conv(x, a), yb = conv(x, b);
  const auto s = stats();
  expect_same(conv(x, a), ya);
  expect_same(conv(x, b), yb);
  EXPECT_EQ(stats().weight_hits, s.weight_hits + 2);
  b.add_(ones_like(b));  // one storage, one count: both views' copies are stale
  expect_same(conv(x, a), ya);
  expect_same(conv(x, b), conv(x, b.clone()));
  EXPECT_NE(conv(x, b).to_vector<float>(), yb.to_vector<float>());
}

TEST_F(ConvWeightCache, TheCopyIsFreedWithTheWeight) {
  autograd::NoGradGuard no_grad;
  std::weak_ptr<void> copy;
  {
    Tensor w = weight();
    conv(input(), w);
    copy = w.storage().attachment();
    EXPECT_FALSE(copy.expired());
  }
  EXPECT_TRUE(copy.expired());
}

}  // namespace
}  // namespace ddp::test
