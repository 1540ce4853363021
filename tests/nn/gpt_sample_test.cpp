// Sampling from a GPT (ddp/nn/models/gpt.h, Note [Sampling from a GPT]):
// the distribution for a fixed logits vector at several temperatures and
// top-k, greedy top-k = 1, seeded determinism, and the bad options.

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ddp/nn/models/gpt.h"
#include "ddp/tensor/ops.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

using namespace ddp::nn::models;

const std::vector<float> kLogits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};

// softmax(logits / t) computed here independently.
std::vector<double> softmax(const std::vector<float>& x, double t) {
  double sum = 0;
  std::vector<double> p;
  for (float v : x) sum += std::exp(double(v) / t);
  for (float v : x) p.push_back(std::exp(double(v) / t) / sum);
  return p;
}

TEST(Sampling, ProbabilitiesAreTheTemperatureSoftmax) {
  for (double t : {0.25, 1.0, 4.0}) {
    SCOPED_TRACE(t);
    const std::vector<double> want = softmax(kLogits, t);
    const std::vector<double> got = sampling_probabilities(kLogits, t, 0);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  }
  // Colder sharpens towards the maxima, hotter flattens towards uniform.
  EXPECT_GT(sampling_probabilities(kLogits, 0.05, 0)[1], 0.49);
  EXPECT_NEAR(sampling_probabilities(kLogits, 1e6, 0)[2], 0.2, 1e-5);
}

TEST(Sampling, TopKKeepsTheKLargestRenormalised) {
  const std::vector<double> p = sampling_probabilities(kLogits, 1.0, 3);
  // 3.0 (index 1), 3.0 (index 3), 1.0 (index 0); 0.5 and -2 are cut.
  const double z = 2 * std::exp(3.0) + std::exp(1.0);
  EXPECT_NEAR(p[1], std::exp(3.0) / z, 1e-12);
  EXPECT_NEAR(p[3], std::exp(3.0) / z, 1e-12);
  EXPECT_NEAR(p[0], std::exp(1.0) / z, 1e-12);
  EXPECT_EQ(p[2], 0.0);
  EXPECT_EQ(p[4], 0.0);
  EXPECT_NEAR(sampling_probabilities(kLogits, 1.0, 100)[4], softmax(kLogits, 1.0)[4], 1e-12);
}

TEST(Sampling, TopKOneIsGreedyArgmaxWhateverTheDraw) {
  for (double t : {0.1, 1.0, 50.0})
    for (double u : {0.0, 0.5, 0.999999}) {
      // Ties go to the lower index: logits 1 and 3 are both 3.0.
      EXPECT_EQ(sample_from(sampling_probabilities(kLogits, t, 1), u), 1) << t << " " << u;
    }
}

TEST(Sampling, DrawsFollowTheDistribution) {
  const std::vector<double> p = sampling_probabilities(kLogits, 2.0, 0);
  std::mt19937_64 rng(7);
  std::vector<int> counts(p.size(), 0);
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++counts[size_t(sample_from(p, double(rng() >> 11) * 0x1.0p-53))];
  for (size_t i = 0; i < p.size(); ++i) {
    const double sd = std::sqrt(p[i] * (1 - p[i]) / n);
    EXPECT_NEAR(double(counts[i]) / n, p[i], 5 * sd + 1e-9) << i;
  }
  EXPECT_EQ(sample_from({0.0, 1.0, 0.0}, 0.999999999), 1);  // never a zero-probability token
}

TEST(Sampling, GenerateIsSeededAndGreedyIsDeterministic) {
  GPTConfig c;
  c.vocab_size = 300, c.block_size = 8, c.n_layer = 1, c.n_head = 2, c.n_embd = 16;
  manual_seed(3);
  GPT model(c);
  model.train();
  const std::vector<int64_t> prompt = {72, 105};
  SamplingOptions o{.temperature = 0.8, .top_k = 0, .vocab_limit = 256, .seed = 11};
  const auto a = generate(model, prompt, 20, o);  // longer than the context: the window slides
  const auto b = generate(model, prompt, 20, o);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 20u);
  for (int64_t t : a) EXPECT_TRUE(t >= 0 && t < 256) << t;  // vocab_limit
  o.seed = 12;
  EXPECT_NE(generate(model, prompt, 20, o), a);
  EXPECT_TRUE(model.is_training()) << "the training mode comes back";

  // Greedy: each token is the argmax of the model's logits for the sequence so far.
  const auto greedy = generate(model, prompt, 3, {.top_k = 1, .seed = 1});
  const auto greedy_other_seed =
      generate(model, prompt, 3, {.temperature = 3.0, .top_k = 1, .seed = 99});
  EXPECT_EQ(greedy, greedy_other_seed);
  model.eval();
  std::vector<int64_t> seq = prompt;
  for (int64_t expected : greedy) {
    Tensor logits = model.forward(Tensor::from_vector(seq, {1, int64_t(seq.size())}));
    const std::vector<float> last = logits.select(1, int64_t(seq.size()) - 1).to_vector<float>();
    const int64_t argmax = int64_t(std::max_element(last.begin(), last.end()) - last.begin());
    EXPECT_EQ(expected, argmax);
    seq.push_back(expected);
  }
}

TEST(Sampling, RefusesBadOptions) {
  EXPECT_DDP_ERROR(sampling_probabilities(kLogits, 0.0, 0), ValueError,
                   "temperature must be a positive");
  EXPECT_DDP_ERROR(sampling_probabilities(kLogits, -1.0, 0), ValueError, "got -1");
  EXPECT_DDP_ERROR(sampling_probabilities(kLogits, NAN, 0), ValueError, "temperature");
  EXPECT_DDP_ERROR(sampling_probabilities(kLogits, 1.0, -2), ValueError, "top_k must be >= 0");
  GPTConfig c;
  c.vocab_size = 10, c.block_size = 4, c.n_layer = 1, c.n_head = 1, c.n_embd = 4;
  GPT model(c);
  EXPECT_DDP_ERROR(generate(model, {}, 3), ValueError, "at least one token");
  EXPECT_DDP_ERROR(generate(model, {12}, 3), ValueError,
                   "prompt token 12 is outside the vocabulary 10");
  EXPECT_DDP_ERROR(generate(model, {1}, 3, {.temperature = -1}), ValueError, "temperature");
}

}  // namespace
}  // namespace ddp::test
