// Samplers (sampler.h). See Note [Epoch shuffling].

#include "ddp/data/sampler.h"

#include <numeric>
#include <utility>

#include "data/data_util.h"
#include "ddp/core/error.h"

namespace ddp::data {

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed) {
  DDP_CHECK(n >= 0, "random_permutation: n {} < 0", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t(0));
  // Fisher-Yates from the back; step k uses 64 bits, two per Philox draw.
  const uint64_t key = detail::mix64(seed);
  detail::Words w{};
  for (int64_t i = n - 1, k = 0; i > 0; --i, ++k) {
    if (k % 2 == 0) w = detail::philox(key, uint64_t(k / 2));
    const int h = int(k % 2) * 2;
    const uint64_t bits = (uint64_t(w.w[h]) << 32) | w.w[h + 1];
    std::swap(p[size_t(i)], p[size_t(detail::below(bits, uint64_t(i) + 1))]);
  }
  return p;
}

// torch keys its generator with seed + epoch; so do we (then mixed), so that a
// user's seed arithmetic reads the same.
static uint64_t epoch_seed(uint64_t seed, int64_t epoch) { return seed + uint64_t(epoch); }

SequentialSampler::SequentialSampler(int64_t dataset_size) : n_(dataset_size) {
  DDP_CHECK(dataset_size >= 0, "SequentialSampler: dataset_size {} < 0", dataset_size);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> p(static_cast<size_t>(n_));
  std::iota(p.begin(), p.end(), int64_t(0));
  return p;
}

RandomSampler::RandomSampler(int64_t dataset_size, uint64_t seed) : n_(dataset_size), seed_(seed) {
  DDP_CHECK(dataset_size >= 0, "RandomSampler: dataset_size {} < 0", dataset_size);
}

std::vector<int64_t> RandomSampler::indices() const {
  return random_permutation(n_, epoch_seed(seed_, epoch_));
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : n_(dataset_size),
      replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  DDP_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size {} < 0", dataset_size);
  DDP_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas {} < 1", num_replicas);
  DDP_CHECK(rank >= 0 && rank < num_replicas,
            "DistributedSampler: rank {} is not in [0, {}) (num_replicas)", rank, num_replicas);
  if (drop_last) {
    DDP_CHECK(dataset_size >= num_replicas,
              "DistributedSampler: drop_last with {} examples for {} replicas leaves every rank "
              "empty",
              dataset_size, num_replicas);
    per_rank_ = n_ / replicas_;  // drop the tail
  } else {
    per_rank_ = (n_ + replicas_ - 1) / replicas_;  // pad up
  }
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  if (shuffle_) {
    all = random_permutation(n_, epoch_seed(seed_, epoch_));
  } else {
    all.resize(size_t(n_));
    std::iota(all.begin(), all.end(), int64_t(0));
  }
  const int64_t total = total_size();
  // Padding repeats from the front, wrapping as often as needed (more
  // replicas than examples).
  for (int64_t i = n_; i < total && n_ > 0; ++i) all.push_back(all[size_t((i - n_) % n_)]);
  std::vector<int64_t> mine;
  mine.reserve(size_t(per_rank_));
  for (int64_t i = rank_; i < total; i += replicas_) mine.push_back(all[size_t(i)]);
  return mine;
}

}  // namespace ddp::data
