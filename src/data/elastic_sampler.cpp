// ElasticSampler (elastic_sampler.h). See Note [Elastic re-partition].

#include "ddp/data/elastic_sampler.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include "ddp/core/error.h"
#include "ddp/data/sampler.h"

namespace ddp::data {

namespace {

constexpr const char* kKeys[] = {"epoch",          "position", "dataset_size",
                                 "batch_per_rank", "seed",     "shuffle"};

// As sampler.cpp's epoch_seed (Note [Epoch shuffling]): torch keys its
// generator with seed + epoch, random_permutation mixes it.
uint64_t epoch_seed(uint64_t seed, int64_t epoch) { return seed + uint64_t(epoch); }

void check_world(const char* who, int rank, int world) {
  DDP_CHECK(world >= 1, "ElasticSampler.{}: world {} < 1", who, world);
  DDP_CHECK(rank >= 0 && rank < world, "ElasticSampler.{}: rank {} is not in [0, {}) (world)", who,
            rank, world);
}

int64_t bits_of(uint64_t v) {
  int64_t s;
  std::memcpy(&s, &v, sizeof s);
  return s;
}
uint64_t unsigned_of(int64_t v) {
  uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

// One integer from a state dict entry: an i64 tensor as it is, another
// dtype when its value is a whole number (exact below 2^53).
int64_t read_integer(const char* who, const std::string& key, const Tensor& t) {
  DDP_CHECK(t.defined(), "{}: '{}' is an undefined tensor", who, key);
  DDP_CHECK(t.numel() == 1 && t.dim() <= 1, "{}: '{}' must hold one integer, got {}", who, key,
            t.describe());
  if (t.dtype() == DType::i64) return t.cpu().item<int64_t>();
  const double v = t.to(Device::cpu(), DType::f64).item<double>();
  DDP_CHECK(std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9007199254740992.0,
            "{}: '{}' must hold one integer, got {} ({})", who, key, v, t.describe());
  return int64_t(v);
}

}  // namespace

int64_t ElasticBatch::local_count() const {
  int64_t c = 0;
  for (float w : weights) c += w != 0.0f;
  return c;
}

ElasticSampler::ElasticSampler(int64_t dataset_size, int64_t batch_per_rank, bool shuffle,
                               uint64_t seed)
    : n_(dataset_size), batch_(batch_per_rank), shuffle_(shuffle), seed_(seed) {
  DDP_CHECK(dataset_size >= 1, "ElasticSampler: dataset_size {} < 1", dataset_size);
  DDP_CHECK(batch_per_rank >= 1, "ElasticSampler: batch_per_rank {} < 1", batch_per_rank);
  fill_order();
}

void ElasticSampler::fill_order() {
  if (shuffle_) {
    order_ = random_permutation(n_, epoch_seed(seed_, epoch_));
  } else {
    order_.resize(size_t(n_));
    std::iota(order_.begin(), order_.end(), int64_t(0));
  }
}

void ElasticSampler::set_epoch(int64_t epoch) {
  DDP_CHECK(epoch >= 0, "ElasticSampler.set_epoch: epoch {} < 0", epoch);
  if (epoch != epoch_) {
    epoch_ = epoch;
    fill_order();
  }
  position_ = 0;
}

int64_t ElasticSampler::step_count(int world) const {
  DDP_CHECK(world >= 1, "ElasticSampler.step_count: world {} < 1", world);
  DDP_CHECK(!epoch_done(),
            "ElasticSampler: epoch {} is done (all {} samples consumed); call set_epoch() for the "
            "next one",
            epoch_, n_);
  const int64_t left = remaining();
  // min(world * batch, left) without overflowing world * batch.
  return batch_ > left / world ? left : batch_ * world;
}

ElasticBatch ElasticSampler::batch(int rank, int world) const {
  check_world("batch", rank, world);
  const int64_t g = step_count(world);
  const int64_t per = (g + world - 1) / world;
  const int64_t* slice = order_.data() + position_;
  ElasticBatch b;
  b.global_count = g;
  b.indices.reserve(size_t(per));
  b.weights.reserve(size_t(per));
  for (int64_t k = 0; k < per; ++k) {
    const int64_t j = rank + k * world;  // position in the step's slice
    const bool real = j < g;
    b.indices.push_back(slice[real ? j : j % g]);
    b.weights.push_back(real ? 1.0f : 0.0f);
  }
  return b;
}

void ElasticSampler::advance(int world) { position_ += step_count(world); }

int64_t ElasticSampler::steps_left(int world) const {
  DDP_CHECK(world >= 1, "ElasticSampler.steps_left: world {} < 1", world);
  const int64_t left = remaining();
  if (left == 0) return 0;
  if (batch_ > left / world) return 1;
  const int64_t step = batch_ * world;
  return (left + step - 1) / step;
}

TensorDict ElasticSampler::state_dict() const {
  auto i64 = [](int64_t v) { return Tensor::from_vector<int64_t>({v}, {}); };
  return {{"epoch", i64(epoch_)},        {"position", i64(position_)},
          {"dataset_size", i64(n_)},     {"batch_per_rank", i64(batch_)},
          {"seed", i64(bits_of(seed_))}, {"shuffle", i64(shuffle_ ? 1 : 0)}};
}

void ElasticSampler::load_state_dict(const TensorDict& state) {
  const char* who = "ElasticSampler.load_state_dict";
  for (const auto& [key, t] : state) {
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    DDP_CHECK(known, "{}: unexpected key '{}' (expected {})", who, key, fmt::join(kKeys, ", "));
  }
  auto get = [&](const char* key) {
    const Tensor* t = state.find(key);
    DDP_CHECK(t, "{}: missing key '{}'", who, key);
    return read_integer(who, key, *t);
  };
  const int64_t epoch = get("epoch"), position = get("position"), n = get("dataset_size"),
                batch = get("batch_per_rank"), seed = get("seed"), shuffle = get("shuffle");
  DDP_CHECK(n == n_,
            "{}: dataset_size mismatch: the state is for a dataset of {} samples, this sampler's "
            "has {}",
            who, n, n_);
  DDP_CHECK(batch == batch_, "{}: batch_per_rank mismatch: the state has {}, this sampler {}", who,
            batch, batch_);
  DDP_CHECK(unsigned_of(seed) == seed_, "{}: seed mismatch: the state has {}, this sampler {}", who,
            unsigned_of(seed), seed_);
  DDP_CHECK(shuffle == 0 || shuffle == 1, "{}: 'shuffle' must be 0 or 1, got {}", who, shuffle);
  DDP_CHECK((shuffle == 1) == shuffle_, "{}: shuffle mismatch: the state has {}, this sampler {}",
            who, shuffle == 1, shuffle_);
  DDP_CHECK(epoch >= 0, "{}: 'epoch' {} < 0", who, epoch);
  DDP_CHECK(position >= 0 && position <= n_, "{}: 'position' {} is not in [0, {}] (dataset_size)",
            who, position, n_);
  if (epoch != epoch_) {
    epoch_ = epoch;
    fill_order();
  }
  position_ = position;
}

float elastic_loss_scale(const ElasticBatch& batch, int world) {
  DDP_CHECK(world >= 1, "elastic_loss_scale: world {} < 1", world);
  DDP_CHECK(batch.global_count >= 1, "elastic_loss_scale: global_count {} < 1 (an empty step)",
            batch.global_count);
  return float(double(world) / double(batch.global_count));
}

}  // namespace ddp::data
