// Sampling text from a GPT. See Note [Sampling from a GPT] in
// include/ddp/nn/models/gpt.h.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/error.h"
#include "ddp/nn/models/gpt.h"

namespace ddp::nn::models {

std::vector<double> sampling_probabilities(const std::vector<float>& logits, double temperature,
                                           int64_t top_k) {
  DDP_CHECK(std::isfinite(temperature) && temperature > 0,
            "sampling: the temperature must be a positive number, got {}", temperature);
  DDP_CHECK(top_k >= 0, "sampling: top_k must be >= 0 (0: every token), got {}", top_k);
  DDP_CHECK(!logits.empty(), "sampling: no logits");
  const size_t n = logits.size();
  const size_t k = top_k == 0 ? n : std::min(n, size_t(top_k));
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  // The k largest, the lower index first among equals.
  std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(k), order.end(),
                    [&](size_t a, size_t b) {
                      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                    });
  std::vector<double> p(n, 0.0);
  const double top = double(logits[order[0]]);
  double sum = 0;
  for (size_t i = 0; i < k; ++i) {
    // Subtracting the largest keeps exp() in range; -inf logits get 0.
    const double e = std::exp((double(logits[order[i]]) - top) / temperature);
    p[order[i]] = e;
    sum += e;
  }
  DDP_CHECK(std::isfinite(sum) && sum > 0, "sampling: the logits are not finite");
  for (double& x : p) x /= sum;
  return p;
}

int64_t sample_from(const std::vector<double>& probabilities, double u) {
  double cumulative = 0;
  int64_t last_possible = -1;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    if (probabilities[i] <= 0) continue;
    last_possible = int64_t(i);
    cumulative += probabilities[i];
    if (u < cumulative) return int64_t(i);
  }
  DDP_CHECK(last_possible >= 0, "sampling: every probability is 0");
  return last_possible;  // u beyond a sum rounded below 1
}

std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt, int64_t n,
                              const SamplingOptions& options) {
  const GPTConfig& c = model.config();
  DDP_CHECK(!prompt.empty(), "generate: the prompt needs at least one token");
  DDP_CHECK(n >= 0, "generate: cannot sample {} tokens", n);
  const int64_t vocab =
      options.vocab_limit > 0 ? std::min(options.vocab_limit, c.vocab_size) : c.vocab_size;
  for (int64_t t : prompt)
    DDP_CHECK(t >= 0 && t < c.vocab_size, "generate: prompt token {} is outside the vocabulary {}",
              t, c.vocab_size);
  sampling_probabilities({0.0f}, options.temperature, options.top_k);  // checks the options

  const bool was_training = model.is_training();
  model.eval();
  autograd::NoGradGuard no_grad;
  std::mt19937_64 rng(options.seed);
  std::vector<int64_t> tokens = prompt, out;
  const Device device = model.wte->weight.device();
  try {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t T = std::min<int64_t>(int64_t(tokens.size()), c.block_size);
      std::vector<int64_t> window(tokens.end() - T, tokens.end());
      Tensor input = Tensor::from_vector(window, {1, T}).to(device);
      Tensor logits = model.forward(input).select(1, T - 1).narrow(1, 0, vocab);
      const std::vector<float> row = logits.to(kFloat32).to_vector<float>();
      const double u = double(rng() >> 11) * 0x1.0p-53;  // 53 random bits in [0, 1)
      const int64_t next =
          sample_from(sampling_probabilities(row, options.temperature, options.top_k), u);
      tokens.push_back(next);
      out.push_back(next);
    }
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  return out;
}

}  // namespace ddp::nn::models
