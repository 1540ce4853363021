// amp::Autocast on the CPU: the scope's thread-local state, every entry of
// the policy table, master weights and their gradients, the weight-cast
// cache, small models against f32, and bad input.
//
// Tolerances for "close to f32" follow from the formats' unit roundoff u
// (half an ulp at 1): u = 2^-8 for bf16 (8 significant bits), 2^-11 for
// f16. A lower-precision matmul rounds both operands and its output, each
// by at most u relative, and accumulates in f32, so one layer is off by at
// most 3u relative to the scale of its terms; two such layers in a row
// (plus the f32 reference's own, negligible, error) stay within 8u of the
// output's scale. The loss (mean cross entropy) has gradient at most 1 in
// each logit, so its error is bounded by the logits' largest error.

#include "ddp/amp/autocast.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/functional/activation.h"
#include "ddp/nn/functional/attention.h"
#include "ddp/nn/functional/batch_norm.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/dropout.h"
#include "ddp/nn/functional/layer_norm.h"
#include "ddp/nn/functional/linear.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/functional/pooling.h"
#include "ddp/nn/nn.h"
#include "ddp/tensor/ops.h"
#include "nn/nn_test_util.h"
#include "nn/scaled_error.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;
using amp::Autocast;
using amp::CastPolicy;

constexpr double kBf16U = 1.0 / 256;  // 2^-8
constexpr double kF16U = 1.0 / 2048;  // 2^-11

Tensor rnd(const Shape& shape, Generator& gen, DType dt = DType::f32) {
  return randn(shape, {}, &gen).to(dt);
}
Tensor positive(const Shape& shape, Generator& gen, DType dt = DType::f32) {
  return (rand(shape, {}, &gen) + 0.5).to(dt);
}
Tensor labels(int64_t n, int64_t classes) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back((3 * i + 1) % classes);
  return Tensor::from_vector(v, {n});
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.to(DType::f64).to_vector<double>() == b.to(DType::f64).to_vector<double>();
}

// ---- the scope ------------------------------------------------------------

TEST(Autocast, ScopeSetsAndRestoresThreadState) {
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CUDA));
  EXPECT_EQ(amp::autocast_dtype(DeviceType::CPU), DType::bf16);  // torch's defaults
  EXPECT_EQ(amp::autocast_dtype(DeviceType::CUDA), DType::f16);
  {
    Autocast outer(DeviceType::CPU, DType::f16);
    EXPECT_TRUE(amp::is_autocast_enabled(DeviceType::CPU));
    EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CUDA));  // per device type
    EXPECT_EQ(amp::autocast_dtype(DeviceType::CPU), DType::f16);
    {
      Autocast off(DeviceType::CPU, std::nullopt, /*enabled=*/false);
      EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
      EXPECT_EQ(amp::autocast_dtype(DeviceType::CPU), DType::f16);  // nullopt keeps the dtype
      {
        Autocast again(Device::cpu(), DType::bf16);
        EXPECT_TRUE(amp::is_autocast_enabled(DeviceType::CPU));
        EXPECT_EQ(amp::autocast_dtype(DeviceType::CPU), DType::bf16);
      }
      EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
      EXPECT_EQ(amp::autocast_dtype(DeviceType::CPU), DType::f16);
    }
    EXPECT_TRUE(amp::is_autocast_enabled(DeviceType::CPU));
    {
      Autocast cuda(Device::cuda(1), DType::bf16);  // the index plays no part
      EXPECT_TRUE(amp::is_autocast_enabled(DeviceType::CUDA));
      EXPECT_EQ(amp::autocast_dtype(DeviceType::CUDA), DType::bf16);
      EXPECT_EQ(amp::autocast_dtype(DeviceType::CPU), DType::f16);
    }
    EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CUDA));
  }
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
  EXPECT_EQ(amp::autocast_dtype(DeviceType::CPU), DType::bf16);
}

TEST(Autocast, NestedDisableRunsInInputPrecision) {
  Generator gen(1);
  Tensor x = rnd({3, 4}, gen), w = rnd({5, 4}, gen);
  Autocast on(DeviceType::CPU, DType::bf16);
  EXPECT_EQ(F::linear(x, w).dtype(), DType::bf16);
  {
    Autocast off(DeviceType::CPU, DType::bf16, false);
    EXPECT_EQ(F::linear(x, w).dtype(), DType::f32);
    EXPECT_EQ(softmax(x.to(DType::bf16)).dtype(), DType::bf16);
  }
  EXPECT_EQ(F::linear(x, w).dtype(), DType::bf16);
}

TEST(Autocast, StateIsThreadLocal) {
  Generator gen(2);
  Tensor x = rnd({3, 4}, gen), w = rnd({5, 4}, gen);
  Autocast on(DeviceType::CPU, DType::bf16);
  bool other_enabled = true;
  DType other_dtype = DType::bf16;
  std::thread t([&] {
    other_enabled = amp::is_autocast_enabled(DeviceType::CPU);
    other_dtype = F::linear(x, w).dtype();
  });
  t.join();
  EXPECT_FALSE(other_enabled);
  EXPECT_EQ(other_dtype, DType::f32);
  EXPECT_EQ(F::linear(x, w).dtype(), DType::bf16);
}

TEST(Autocast, CudaScopeLeavesCpuOpsAlone) {
  Generator gen(3);
  Tensor x = rnd({3, 4}, gen), w = rnd({5, 4}, gen);
  Autocast cuda(DeviceType::CUDA, DType::bf16);
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
  EXPECT_EQ(F::linear(x, w).dtype(), DType::f32);
  EXPECT_EQ(softmax(x.to(DType::bf16)).dtype(), DType::bf16);
}

TEST(Autocast, BadDTypesAndDeviceTypes) {
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8, DType::bool_}) {
    SCOPED_TRACE(dtype_name(dt));
    EXPECT_DDP_ERROR(Autocast a(DeviceType::CPU, dt), ValueError, "bf16 or f16");
    EXPECT_DDP_ERROR(Autocast a(DeviceType::CUDA, dt, false), ValueError, dtype_name(dt));
    EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CPU));  // a failed scope changed nothing
    EXPECT_EQ(amp::autocast_dtype(DeviceType::CPU), DType::bf16);
  }
  const auto bogus = static_cast<DeviceType>(7);
  EXPECT_DDP_ERROR(Autocast a(bogus, DType::bf16), ValueError, "unknown device type 7");
  EXPECT_DDP_ERROR(amp::is_autocast_enabled(bogus), ValueError, "unknown device type");
  EXPECT_DDP_ERROR(amp::autocast_dtype(bogus), ValueError, "unknown device type");
}

// ---- the policy table, op by op ---------------------------------------------

TEST(Autocast, PolicyTableLookups) {
  std::set<std::string> names;
  for (const amp::AutocastPolicyEntry& e : amp::autocast_policy_table()) {
    EXPECT_TRUE(names.insert(e.op).second) << "listed twice: " << e.op;
    EXPECT_EQ(amp::autocast_policy(e.op), e.policy);
  }
  EXPECT_EQ(amp::autocast_policy("linear"), CastPolicy::lower_precision);
  EXPECT_EQ(amp::autocast_policy("conv2d"), CastPolicy::lower_precision);
  EXPECT_EQ(amp::autocast_policy("layer_norm"), CastPolicy::f32);
  EXPECT_EQ(amp::autocast_policy("cross_entropy"), CastPolicy::f32);
  EXPECT_EQ(amp::autocast_policy("cat"), CastPolicy::promote);
  EXPECT_EQ(amp::autocast_policy("batch_norm"), CastPolicy::keep_input);
  EXPECT_EQ(amp::autocast_policy("relu"), std::nullopt);
  EXPECT_EQ(amp::autocast_policy(""), std::nullopt);
  EXPECT_STREQ(amp::policy_name(CastPolicy::lower_precision), "lower_precision");
  EXPECT_STREQ(amp::policy_name(CastPolicy::f32), "f32");
  EXPECT_STREQ(amp::policy_name(CastPolicy::promote), "promote");
  EXPECT_STREQ(amp::policy_name(CastPolicy::keep_input), "keep_input");
}

// One case per table entry: inputs whose floating tensors all have `dt`
// (promote: the first has dt, the others f32), and the op on them.
struct OpCase {
  std::function<Tensors(DType dt)> inputs;
  std::function<Tensor(const Tensors&)> run;
};

std::map<std::string, OpCase> op_cases() {
  auto gen = std::make_shared<Generator>(11);
  auto randn_of = [gen](std::vector<Shape> shapes) {
    return [gen, shapes](DType dt) {
      Tensors t;
      for (const Shape& s : shapes) t.push_back(rnd(s, *gen, dt));
      return t;
    };
  };
  auto positive_of = [gen](Shape s) {
    return [gen, s](DType dt) { return Tensors{positive(s, *gen, dt)}; };
  };
  std::map<std::string, OpCase> c;
  c["matmul"] = {randn_of({{3, 4}, {4, 5}}), [](const Tensors& t) { return matmul(t[0], t[1]); }};
  c["bmm"] = {randn_of({{2, 3, 4}, {2, 4, 5}}), [](const Tensors& t) { return bmm(t[0], t[1]); }};
  c["linear"] = {randn_of({{3, 4}, {5, 4}, {5}}),
                 [](const Tensors& t) { return F::linear(t[0], t[1], t[2]); }};
  c["conv2d"] = {randn_of({{1, 2, 5, 5}, {3, 2, 3, 3}, {3}}),
                 [](const Tensors& t) { return F::conv2d(t[0], t[1], t[2], {.padding = 1}); }};
  c["scaled_dot_product_attention"] = {
      randn_of({{1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}}),
      [](const Tensors& t) { return F::scaled_dot_product_attention(t[0], t[1], t[2], true); }};
  c["softmax"] = {randn_of({{3, 5}}), [](const Tensors& t) { return softmax(t[0], 1); }};
  c["log_softmax"] = {randn_of({{3, 5}}), [](const Tensors& t) { return log_softmax(t[0], 0); }};
  c["cross_entropy"] = {randn_of({{4, 5}}), [](const Tensors& t) {
                          return F::cross_entropy(t[0], labels(4, 5), F::Reduction::mean, 0.1);
                        }};
  c["mse_loss"] = {randn_of({{3, 4}, {3, 4}}),
                   [](const Tensors& t) { return F::mse_loss(t[0], t[1]); }};
  c["layer_norm"] = {randn_of({{3, 4}, {4}, {4}}),
                     [](const Tensors& t) { return F::layer_norm(t[0], {4}, t[1], t[2]); }};
  c["batch_norm"] = {randn_of({{4, 3, 2, 2}, {3}, {3}}), [](const Tensors& t) {
                       Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
                       return F::batch_norm(t[0], rm, rv, t[1], t[2], true);
                     }};
  c["sum"] = {randn_of({{3, 4}}), [](const Tensors& t) { return sum(t[0], {1}); }};
  c["mean"] = {randn_of({{3, 4}}), [](const Tensors& t) { return mean(t[0]); }};
  c["var"] = {randn_of({{3, 4}}), [](const Tensors& t) { return var(t[0], {0}); }};
  c["exp"] = {randn_of({{3, 4}}), [](const Tensors& t) { return exp(t[0]); }};
  c["log"] = {positive_of({3, 4}), [](const Tensors& t) { return log(t[0]); }};
  c["rsqrt"] = {positive_of({3, 4}), [](const Tensors& t) { return rsqrt(t[0]); }};
  c["pow"] = {positive_of({3, 4}), [](const Tensors& t) { return pow(t[0], 1.7); }};
  c["cat"] = {randn_of({{2, 3}, {4, 3}}), [](const Tensors& t) { return cat(t, 0); }};
  c["stack"] = {randn_of({{2, 3}, {2, 3}}), [](const Tensors& t) { return stack(t, 1); }};
  return c;
}

// The floating inputs cast to dt (what the policy should have done by hand).
Tensors cast_floating(const Tensors& xs, DType dt) {
  Tensors out;
  for (const Tensor& x : xs) out.push_back(is_floating(x.dtype()) ? x.to(dt) : x);
  return out;
}

// Every op in the table casts as its policy says: the output has the
// expected dtype and equals, bit for bit, the op run outside the scope on
// inputs cast by hand; outside the scope the op keeps its input's dtype.
void check_every_entry(DType low) {
  std::map<std::string, OpCase> cases = op_cases();
  for (const amp::AutocastPolicyEntry& e : amp::autocast_policy_table()) {
    SCOPED_TRACE(e.op);
    auto it = cases.find(e.op);
    ASSERT_NE(it, cases.end()) << "the policy table lists " << e.op
                               << " but this test has no case for it: add one to op_cases()";
    const OpCase& c = it->second;
    // The dtype the inputs start in, and the one the policy must produce.
    const bool keep = e.policy == CastPolicy::keep_input;
    const DType in = e.policy == CastPolicy::lower_precision ? DType::f32 : low;
    const DType want = e.policy == CastPolicy::lower_precision || keep ? low : DType::f32;
    Tensors xs = c.inputs(in);
    if (e.policy == CastPolicy::promote) xs[1] = xs[1].to(DType::f32);  // mixed dtypes
    Tensor got;
    {
      Autocast on(DeviceType::CPU, low);
      got = c.run(xs);
    }
    EXPECT_EQ(got.dtype(), want);
    // keep_input: the activation as it is, the parameters in f32.
    Tensors by_hand = keep ? cast_floating(xs, DType::f32) : cast_floating(xs, want);
    if (keep) by_hand[0] = xs[0];
    EXPECT_TRUE(bit_equal(got, c.run(by_hand)));
    // Outside the scope nothing changes (promote: the op refuses mixed dtypes).
    if (e.policy == CastPolicy::promote) {
      EXPECT_THROW(c.run(xs), DTypeError);
    } else {
      EXPECT_EQ(c.run(xs).dtype(), in);
    }
  }
}

TEST(Autocast, EveryPolicyEntryBf16) { check_every_entry(DType::bf16); }
TEST(Autocast, EveryPolicyEntryF16) { check_every_entry(DType::f16); }

TEST(Autocast, OpsOutsideTheTableKeepTheirDType) {
  Generator gen(4);
  Autocast on(DeviceType::CPU, DType::bf16);
  for (DType dt : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = rnd({2, 3, 4, 4}, gen, dt);
    EXPECT_EQ(relu(x).dtype(), dt);
    EXPECT_EQ(F::gelu(x).dtype(), dt);
    EXPECT_EQ(tanh(x).dtype(), dt);
    EXPECT_EQ((x * x + 1.0).dtype(), dt);
    EXPECT_EQ(F::max_pool2d(x, 2, 2).dtype(), dt);
    EXPECT_EQ(F::dropout(x, 0.5, true, &gen).dtype(), dt);
  }
  // Binary arithmetic promotes by itself, scope or not.
  EXPECT_EQ((rnd({3}, gen, DType::bf16) + rnd({3}, gen)).dtype(), DType::f32);
}

TEST(Autocast, F64IsLeftAlone) {
  Generator gen(5);
  Tensor x = rnd({3, 4}, gen, DType::f64), w = rnd({5, 4}, gen, DType::f64);
  Autocast on(DeviceType::CPU, DType::bf16);
  EXPECT_EQ(F::linear(x, w).dtype(), DType::f64);
  EXPECT_EQ(softmax(x).dtype(), DType::f64);
  EXPECT_EQ(cat({x, rnd({1, 4}, gen)}).dtype(), DType::f64);  // promote: the widest
}

// ---- master weights and their gradients ----------------------------------------

TEST(Autocast, MasterWeightsAndGradientsStayF32) {
  manual_seed(6);
  nn::Linear layer(4, 3);
  Generator gen(6);
  Tensor x = rnd({5, 4}, gen).set_requires_grad();
  Tensor y, loss;
  {
    Autocast on(DeviceType::CPU, DType::bf16);
    y = layer(x);
    loss = sum(y);
  }
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(loss.dtype(), DType::f32);
  loss.backward();
  for (const Tensor* p : {&layer.weight, &layer.bias, &x}) {
    EXPECT_EQ(p->dtype(), DType::f32);
    ASSERT_TRUE(p->grad().defined());
    EXPECT_EQ(p->grad().dtype(), DType::f32);
  }
  // The same graph with the casts written out gives the same gradients.
  Tensor w2 = layer.weight.detach().clone().set_requires_grad();
  Tensor b2 = layer.bias.detach().clone().set_requires_grad();
  Tensor x2 = x.detach().clone().set_requires_grad();
  Tensor y2 = F::linear(x2.to(DType::bf16), w2.to(DType::bf16), b2.to(DType::bf16));
  sum(y2.to(DType::f32)).backward();
  EXPECT_TRUE(bit_equal(y, y2));
  EXPECT_TRUE(bit_equal(layer.weight.grad(), w2.grad()));
  EXPECT_TRUE(bit_equal(layer.bias.grad(), b2.grad()));
  EXPECT_TRUE(bit_equal(x.grad(), x2.grad()));
}

// ---- the weight-cast cache ------------------------------------------------------

TEST(Autocast, WeightUsedTwiceIsCastOnce) {
  Generator gen(7);
  Tensor w = rnd({5, 4}, gen).set_requires_grad();
  Tensor x1 = rnd({3, 4}, gen), x2 = rnd({2, 4}, gen);
  const amp::AutocastCacheStats before = amp::autocast_cache_stats();
  EXPECT_EQ(before.entries, 0);
  Tensor loss;
  {
    Autocast on(DeviceType::CPU, DType::bf16);
    loss = sum(F::linear(x1, w)) + sum(F::linear(x2, w));
    const amp::AutocastCacheStats s = amp::autocast_cache_stats();
    EXPECT_EQ(s.entries, 1);
    EXPECT_EQ(s.misses - before.misses, 1);  // one cast ...
    EXPECT_EQ(s.hits - before.hits, 1);      // ... used twice
  }
  EXPECT_EQ(amp::autocast_cache_stats().entries, 0);  // the outermost scope cleared it
  loss.backward();
  // Each use's gradient reaches the f32 weight: as with two separate casts.
  Tensor w2 = w.detach().clone().set_requires_grad();
  (sum(F::linear(x1.to(DType::bf16), w2.to(DType::bf16)).to(DType::f32)) +
   sum(F::linear(x2.to(DType::bf16), w2.to(DType::bf16)).to(DType::f32)))
      .backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_TRUE(bit_equal(w.grad(), w2.grad()));
}

TEST(Autocast, CacheLivesUntilTheOutermostScopeExits) {
  Generator gen(8);
  Tensor w = rnd({5, 4}, gen).set_requires_grad(), x = rnd({3, 4}, gen);
  Autocast outer(DeviceType::CPU, DType::bf16);
  {
    Autocast inner(DeviceType::CPU, DType::bf16);
    F::linear(x, w);
  }
  EXPECT_EQ(amp::autocast_cache_stats().entries, 1);  // an inner scope keeps it
  {
    NoGradGuard no_grad;  // inference reuses the copy too
    const int64_t hits = amp::autocast_cache_stats().hits;
    F::linear(x, w);
    EXPECT_EQ(amp::autocast_cache_stats().hits, hits + 1);
  }
  {
    Autocast f16(DeviceType::CPU, DType::f16);  // another dtype, another copy
    F::linear(x, w);
    EXPECT_EQ(amp::autocast_cache_stats().entries, 2);
  }
  amp::clear_autocast_cache();
  EXPECT_EQ(amp::autocast_cache_stats().entries, 0);
}

TEST(Autocast, OnlyParametersAreCached) {
  Generator gen(9);
  Tensor w = rnd({5, 4}, gen).set_requires_grad(), x = rnd({3, 4}, gen);
  Tensor frozen = rnd({5, 4}, gen);  // no grad: cast per use, like torch
  Autocast on(DeviceType::CPU, DType::bf16);
  const int64_t misses = amp::autocast_cache_stats().misses;
  F::linear(x, frozen);
  F::linear(x, w * 2.0);  // not a leaf
  EXPECT_EQ(amp::autocast_cache_stats().misses, misses);
  EXPECT_EQ(amp::autocast_cache_stats().entries, 0);
}

TEST(Autocast, CachedCastSurvivesBackwardInsideTheScope) {
  // Gradient accumulation within one scope: the second backward runs
  // through a new node per use, not the first one's freed node.
  Generator gen(10);
  Tensor w = rnd({5, 4}, gen).set_requires_grad(), x = rnd({3, 4}, gen);
  Tensor first;
  {
    Autocast on(DeviceType::CPU, DType::bf16);
    for (int step = 0; step < 2; ++step) {
      sum(F::linear(x, w)).backward();
      if (step == 0) first = w.grad().clone();
    }
  }
  EXPECT_TRUE(bit_equal(w.grad(), first * 2.0));
}

// ---- small models against f32 ----------------------------------------------------

struct RunResult {
  Tensor logits, loss;
  Tensors grads;
};

RunResult run_model(nn::Module& model, nn::UnaryModule& forward, const Tensor& x,
                    const Tensor& target, std::optional<DType> low) {
  model.zero_grad();
  RunResult r;
  {
    std::optional<Autocast> scope;
    if (low) scope.emplace(DeviceType::CPU, *low);
    r.logits = forward(x);
    r.loss = F::cross_entropy(r.logits, target);
  }
  r.loss.backward();
  for (const Tensor& p : model.parameters()) r.grads.push_back(p.grad());
  return r;
}

void expect_close_to_f32(nn::Module& model, nn::UnaryModule& forward, const Tensor& x,
                         const Tensor& target, DType low, double u) {
  RunResult ref = run_model(model, forward, x, target, std::nullopt);
  RunResult amp = run_model(model, forward, x, target, low);
  EXPECT_EQ(amp.logits.dtype(), low);
  EXPECT_EQ(amp.loss.dtype(), DType::f32);
  const double logit_err = scaled_error(amp.logits, ref.logits);
  EXPECT_LE(logit_err, 8 * u);
  EXPECT_GT(logit_err, 0.0);  // it did run in the lower precision
  EXPECT_LE(std::abs(amp.loss.item<float>() - ref.loss.item<float>()),
            8 * u * std::max(1.0, double(max(abs(ref.logits)).item<float>())));
  ASSERT_EQ(amp.grads.size(), ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(amp.grads[i].defined());
    EXPECT_EQ(amp.grads[i].dtype(), DType::f32);
    // Backward rounds about as often again as forward does, and its sums
    // over the batch cancel (BatchNorm's backward subtracts means), so the
    // bound is twice the forward's; the conv net's conv gradients come
    // closest (about 12u for bf16).
    EXPECT_LE(scaled_error(amp.grads[i], ref.grads[i], 1e-3), 16 * u);
  }
  for (const Tensor& p : model.parameters()) EXPECT_EQ(p.dtype(), DType::f32);
}

TEST(Autocast, MlpUnderBf16IsCloseToF32) {
  manual_seed(12);
  nn::Sequential mlp({std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::GELU>(),
                      std::make_shared<nn::Linear>(32, 10)});
  Generator gen(12);
  Tensor x = rnd({8, 16}, gen);
  expect_close_to_f32(mlp, mlp, x, labels(8, 10), DType::bf16, kBf16U);
}

TEST(Autocast, MlpUnderF16IsCloseToF32) {
  manual_seed(13);
  nn::Sequential mlp({std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::GELU>(),
                      std::make_shared<nn::Linear>(32, 10)});
  Generator gen(13);
  Tensor x = rnd({8, 16}, gen);
  expect_close_to_f32(mlp, mlp, x, labels(8, 10), DType::f16, kF16U);
}

TEST(Autocast, ConvNetUnderBf16IsCloseToF32) {
  manual_seed(14);
  auto conv = std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1);
  auto bn = std::make_shared<nn::BatchNorm2d>(8);
  nn::Sequential net({conv, bn, std::make_shared<nn::ReLU>(),
                      std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(),
                      std::make_shared<nn::Linear>(8, 4)});
  Generator gen(14);
  Tensor x = rnd({4, 3, 6, 6}, gen);
  {
    // The activations' dtypes along the way.
    Autocast on(DeviceType::CPU, DType::bf16);
    Tensor h = conv->forward(x);
    EXPECT_EQ(h.dtype(), DType::bf16);
    EXPECT_EQ(bn->forward(h).dtype(), DType::bf16);  // statistics in f32 inside
  }
  expect_close_to_f32(net, net, x, labels(4, 4), DType::bf16, kBf16U);
  EXPECT_EQ(bn->running_mean.dtype(), DType::f32);
  EXPECT_EQ(bn->running_var.dtype(), DType::f32);
}

TEST(Autocast, BackwardInsideTheScopeGivesF32Gradients) {
  manual_seed(15);
  nn::Linear layer(6, 3);
  Generator gen(15);
  Tensor x = rnd({4, 6}, gen);
  {
    Autocast on(DeviceType::CPU, DType::bf16);
    F::cross_entropy(layer(x), labels(4, 3)).backward();
  }
  Tensor inside_w = layer.weight.grad().clone(), inside_b = layer.bias.grad().clone();
  layer.zero_grad();
  Tensor loss;
  {
    Autocast on(DeviceType::CPU, DType::bf16);
    loss = F::cross_entropy(layer(x), labels(4, 3));
  }
  loss.backward();
  // Inside the scope the backward's own reductions (the bias gradient's
  // sum) run in f32, so the two differ by a final bf16 rounding at most.
  EXPECT_EQ(inside_w.dtype(), DType::f32);
  EXPECT_EQ(inside_b.dtype(), DType::f32);
  EXPECT_LE(scaled_error(inside_w, layer.weight.grad(), 1e-3), 2 * kBf16U);
  EXPECT_LE(scaled_error(inside_b, layer.bias.grad(), 1e-3), 2 * kBf16U);
}

}  // namespace
}  // namespace ddp::test
