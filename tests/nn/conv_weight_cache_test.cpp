// Note [oneDNN weight cache]: a CPU convolution keeps its weight's blocked
// copy once the weight is used twice without a counted write between (Note
// [Tensor version counter]), reuses it while the weight is unwritten, drops
// it at the first use after a write, and frees it with the weight. Every
// result is compared bit for bit with a convolution on a fresh copy of the
// weight (new storage, so nothing cached), which runs the same primitive.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

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
  // The cache is off unless DDP_CONV_WEIGHT_CACHE=1, read at each call.
  void SetUp() override {
    if (!DDP_HAVE_DNNL) GTEST_SKIP() << "built without oneDNN";
    const char* env = std::getenv("DDP_CONV_WEIGHT_CACHE");
    if (env) saved_ = env;
    setenv("DDP_CONV_WEIGHT_CACHE", "1", 1);
  }
  void TearDown() override {
    if (saved_) setenv("DDP_CONV_WEIGHT_CACHE", saved_->c_str(), 1);
    else unsetenv("DDP_CONV_WEIGHT_CACHE");
  }
  std::optional<std::string> saved_;
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

// Evaluation: the first use reorders into scratch, the second keeps its
// reorder, every later one reuses it.
TEST_F(ConvWeightCache, AnUnwrittenWeightIsKeptFromItsSecondUse) {
  autograd::NoGradGuard no_grad;
  Tensor x = input(), w = weight();
  const int64_t bytes = w.numel() * 4;  // f32; a blocked layout pads nothing at 32 channels
  const auto s0 = stats();
  Tensor y0 = conv(x, w);
  const auto s1 = stats();
  EXPECT_EQ(s1.weight_misses, s0.weight_misses + 1);
  EXPECT_EQ(s1.weight_bytes, s0.weight_bytes) << "one use keeps nothing";
  expect_same(conv(x, w), y0);
  const auto s2 = stats();
  EXPECT_EQ(s2.weight_misses, s1.weight_misses + 1);
  EXPECT_EQ(s2.weight_bytes, s1.weight_bytes + bytes) << "the second use keeps its copy";
  for (int i = 0; i < 3; ++i) expect_same(conv(x, w), y0);
  const auto s3 = stats();
  EXPECT_EQ(s3.weight_misses, s2.weight_misses);
  EXPECT_EQ(s3.weight_hits, s2.weight_hits + 3);
  expect_same(y0, conv(x, fresh(w)));
}

TEST_F(ConvWeightCache, EveryCountedWriteRebuildsTheCopy) {
  Tensor x = input(), w = weight();
  autograd::NoGradGuard no_grad;
  conv(x, w);
  conv(x, w);  // kept
  // Each kind of counted write, then two convolutions that must see it (the
  // first drops the stale copy, the second keeps a new one).
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
    EXPECT_EQ(stats().weight_misses, before.weight_misses + 1);
    EXPECT_EQ(stats().weight_bytes, before.weight_bytes - w.numel() * 4) << "stale copy dropped";
    expect_same(y, conv(x, fresh(w)));
    expect_same(conv(x, w), y);
    EXPECT_EQ(stats().weight_bytes, before.weight_bytes) << "kept again";
  }
}

// Forward, backward-data and the optimizer step, as in training, with two
// convolutions of the weight per micro-step and two micro-steps per step
// (gradient accumulation): in micro-step 1 each pass reorders twice (its
// second use keeps the copy), in micro-step 2 all four uses reuse; the step
// then writes the weight, so the next micro-step 1 drops both copies. The trajectory equals one that convolves a fresh tensor (a new
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
    EXPECT_EQ(after.weight_misses - before.weight_misses, 4) << "step " << step;
    EXPECT_EQ(after.weight_hits - before.weight_hits, 4) << "step " << step;
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
  conv(x, a), conv(x, b);  // the second uses keep a copy each
  const auto s = stats();
  expect_same(conv(x, a), ya);
  expect_same(conv(x, b), yb);
  EXPECT_EQ(stats().weight_hits, s.weight_hits + 2);
  b.add_(ones_like(b));  // one storage, one count: both views' copies are stale
  expect_same(conv(x, a), ya);
  expect_same(conv(x, b), conv(x, b.clone()));
  EXPECT_NE(conv(x, b).to_vector<float>(), yb.to_vector<float>());
}

TEST_F(ConvWeightCache, OffByDefault) {
  unsetenv("DDP_CONV_WEIGHT_CACHE");
  autograd::NoGradGuard no_grad;
  Tensor x = input(), w = weight();
  const auto before = stats();
  for (int i = 0; i < 3; ++i) conv(x, w);
  EXPECT_EQ(stats().weight_hits, before.weight_hits);
  EXPECT_EQ(stats().weight_misses, before.weight_misses) << "the cache is not consulted";
  EXPECT_EQ(stats().weight_bytes, before.weight_bytes);
}

// Training without accumulation: the optimizer writes the weight between
// every two uses, so no copy is ever kept.
TEST_F(ConvWeightCache, AWeightWrittenBetweenUsesKeepsNoCopy) {
  Tensor x = input();
  Tensor w = weight().set_requires_grad();
  optim::SGD opt(Tensors{w}, 0.1, {.momentum = 0.9});
  const auto before = stats();
  for (int step = 0; step < 3; ++step) {
    sum(conv(x, w)).backward();
    EXPECT_EQ(stats().weight_bytes, before.weight_bytes) << "step " << step;
    opt.step();
    opt.zero_grad();
  }
  EXPECT_EQ(stats().weight_hits, before.weight_hits);
}

TEST_F(ConvWeightCache, TheCopyIsFreedWithTheWeight) {
  autograd::NoGradGuard no_grad;
  std::weak_ptr<void> copy;
  const int64_t before = stats().weight_bytes;
  {
    Tensor w = weight();
    conv(input(), w);
    conv(input(), w);
    copy = w.storage().attachment();
    EXPECT_FALSE(copy.expired());
    EXPECT_GT(stats().weight_bytes, before);
  }
  EXPECT_TRUE(copy.expired());
  EXPECT_EQ(stats().weight_bytes, before);
}

}  // namespace
}  // namespace ddp::test
