// Tests of Module::state_dict() and Module::load_state_dict(): round trips,
// storage sharing, non-persistent buffers, strict and non-strict errors that
// list every key, dtype conversion, and that a failed load changes nothing.
#include <memory>
#include <string>
#include <vector>

#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::shared_ptr<nn::Sequential> seeded_mlp(uint64_t seed) {
  manual_seed(seed);
  return make_mlp();
}

void expect_same_state(const nn::TensorDict& a, const nn::TensorDict& b) {
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [name, t] : a) EXPECT_EQ(values(t), values(b[name])) << name;
}

TEST(StateDict, RoundTripBetweenTwoModels) {
  auto a = seeded_mlp(1), b = seeded_mlp(2);
  a->train();
  a->forward(randn({6, 4}));  // running statistics and the batch counter move
  ASSERT_NE(values(a->at<TestLinear>(0)->weight), values(b->at<TestLinear>(0)->weight));
  Tensor b_weight = b->at<TestLinear>(0)->weight;
  TensorImpl* impl = b_weight.impl();

  nn::LoadResult r = b->load_state_dict(a->state_dict());
  EXPECT_TRUE(r.ok());
  expect_same_state(a->state_dict(), b->state_dict());
  EXPECT_EQ(b->at<TestBatchNorm1d>(1)->num_batches_tracked.item<int64_t>(), 1);
  // Loaded in place: the same tensor objects, still trainable leaves.
  EXPECT_EQ(b->at<TestLinear>(0)->weight.impl(), impl);
  EXPECT_TRUE(b_weight.requires_grad() && b_weight.is_leaf());
  // The two models do not share storage afterwards.
  EXPECT_NE(b_weight.data_ptr(), a->at<TestLinear>(0)->weight.data_ptr());
}

TEST(StateDict, SharesStorageButIsDetached) {
  auto m = seeded_mlp(3);
  nn::TensorDict sd = m->state_dict();
  Tensor w = m->at<TestLinear>(0)->weight;
  EXPECT_EQ(sd["0.weight"].data_ptr(), w.data_ptr());
  EXPECT_FALSE(sd["0.weight"].requires_grad());
  EXPECT_FALSE(sd["0.weight"].is_same(w));
  sd["0.weight"].fill_(0.5);  // writes through, like torch's state_dict
  EXPECT_EQ(values(w), std::vector<double>(32, 0.5));
}

TEST(StateDict, NonPersistentBuffersAreLeftOut) {
  class WithCache : public nn::Module {
   public:
    WithCache() : Module("WithCache") {
      register_buffer("kept", Tensor::zeros({2}));
      register_buffer("cache", Tensor::zeros({2}), false);
    }
  } m;
  EXPECT_THAT(m.named_buffers().keys(), ElementsAre("kept", "cache"));
  EXPECT_THAT(m.state_dict().keys(), ElementsAre("kept"));
  nn::TensorDict sd;
  sd.insert("kept", Tensor::ones({2}));
  EXPECT_TRUE(m.load_state_dict(sd).ok());
  m.to(kFloat64);
  EXPECT_EQ(m.buffer("cache").dtype(), kFloat64);  // non-persistent buffers still move
}

TEST(StateDict, StrictLoadListsEveryMissingUnexpectedAndMisshapedKey) {
  auto m = seeded_mlp(4);
  nn::TensorDict before = m->state_dict();
  std::vector<std::vector<double>> before_values;
  for (const auto& [name, t] : before) before_values.push_back(values(t));

  nn::TensorDict sd = seeded_mlp(5)->state_dict();
  sd.erase("0.bias");
  sd.erase("1.running_var");
  sd.insert("0.b", Tensor::zeros({8}));
  sd.set("3.weight", Tensor::zeros({3, 9}));
  EXPECT_DDP_ERROR(m->load_state_dict(sd), ShapeError,
                   "Sequential: load_state_dict: missing keys (2): [0.bias, 1.running_var]; "
                   "unexpected keys (1): [0.b]; shape mismatches (1): [3.weight: [3, 8] in the "
                   "module, [3, 9] in the state dict]; nothing was loaded");
  // Nothing was copied, not even the keys that matched.
  size_t i = 0;
  for (const auto& [name, t] : m->state_dict()) EXPECT_EQ(values(t), before_values[i++]) << name;

  // Key errors alone are a ValueError.
  sd.set("3.weight", Tensor::zeros({3, 8}));
  EXPECT_DDP_ERROR(m->load_state_dict(sd), ValueError, "missing keys (2): [0.bias, 1.running_var]");
}

TEST(StateDict, NonStrictLoadReportsKeysAndLoadsTheRest) {
  auto m = seeded_mlp(6);
  nn::TensorDict sd = seeded_mlp(7)->state_dict();
  Tensor bias_before = m->at<TestLinear>(0)->bias.clone();
  sd.erase("0.bias");
  sd.insert("extra", Tensor::zeros({1}));
  nn::LoadResult r = m->load_state_dict(sd, false);
  EXPECT_THAT(r.missing_keys, ElementsAre("0.bias"));
  EXPECT_THAT(r.unexpected_keys, ElementsAre("extra"));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(values(m->at<TestLinear>(0)->weight), values(sd["0.weight"]));
  EXPECT_EQ(values(m->at<TestLinear>(0)->bias), values(bias_before));
}

TEST(StateDict, ShapeMismatchIsAnErrorEvenWhenNotStrict) {
  auto m = seeded_mlp(8);
  nn::TensorDict sd = m->state_dict();
  sd.set("1.weight", Tensor::zeros({4}));
  EXPECT_DDP_ERROR(m->load_state_dict(sd, false), ShapeError,
                   "shape mismatches (1): [1.weight: [8] in the module, [4] in the state dict]");
}

TEST(StateDict, UndefinedTensorsAreRefused) {
  auto m = seeded_mlp(9);
  nn::TensorDict sd = m->state_dict();
  sd.set("0.weight", Tensor());
  EXPECT_DDP_ERROR(m->load_state_dict(sd), ValueError, "undefined tensors (1): [0.weight]");
}

TEST(StateDict, LongKeyListsAreCut) {
  auto m = seeded_mlp(10);
  nn::TensorDict sd = m->state_dict();
  for (int i = 0; i < 60; ++i) sd.insert("junk" + std::to_string(i), Tensor::zeros({1}));
  EXPECT_DDP_ERROR(m->load_state_dict(sd), ValueError, "unexpected keys (60): [junk0, junk1");
  EXPECT_THAT(last_error_message(), HasSubstr("junk49, ... and 10 more]"));
}

TEST(StateDict, LoadConvertsDTypes) {
  auto m = seeded_mlp(11);
  nn::TensorDict sd;
  for (const auto& [name, t] : seeded_mlp(12)->state_dict())
    sd.insert(name, is_floating(t.dtype()) ? t.to(kFloat64) : t.to(kFloat32));
  sd.set("1.num_batches_tracked", Tensor::full({}, 7.0, kFloat32));
  m->load_state_dict(sd);
  EXPECT_EQ(m->at<TestLinear>(0)->weight.dtype(), kFloat32);
  EXPECT_EQ(values(m->at<TestLinear>(0)->weight), values(sd["0.weight"]));  // f32 values in f64
  EXPECT_EQ(m->at<TestBatchNorm1d>(1)->num_batches_tracked.dtype(), kInt64);
  EXPECT_EQ(m->at<TestBatchNorm1d>(1)->num_batches_tracked.item<int64_t>(), 7);
}

TEST(StateDict, LoadingDoesNotRecordAutograd) {
  auto m = seeded_mlp(13);
  m->load_state_dict(seeded_mlp(14)->state_dict());
  for (const auto& [name, p] : m->named_parameters()) {
    EXPECT_TRUE(p.is_leaf()) << name;
    EXPECT_TRUE(p.requires_grad()) << name;
  }
  // Its own state loads onto itself (same storage) without harm.
  nn::TensorDict own = m->state_dict();
  std::vector<double> w = values(own["3.weight"]);
  m->load_state_dict(own);
  EXPECT_EQ(values(m->at<TestLinear>(3)->weight), w);
}

}  // namespace
}  // namespace ddp::test
