#pragma once
// Samplers: the order in which a DataLoader visits a dataset in one epoch
// (torch.utils.data's Sampler family).
//
// Note [Epoch shuffling]
// A shuffled sampler draws its permutation from (seed, epoch) alone, with a
// counter-based generator (Philox, Note [Counter-based RNG]): no state
// carries over from one epoch to the next, so every rank computes the very
// same permutation without communicating, a resumed run sees the same order
// as an uninterrupted one, and set_epoch(e) can jump to any epoch. As in
// torch, forgetting set_epoch() gives the same order every epoch.

#include <cstdint>
#include <memory>
#include <vector>

namespace ddp::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Number of indices one epoch yields (len(sampler)).
  virtual int64_t size() const = 0;
  // The indices of the current epoch, in order.
  virtual std::vector<int64_t> indices() const = 0;
  // Selects the epoch whose order indices() returns (a no-op for
  // unshuffled samplers).
  virtual void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 protected:
  int64_t epoch_ = 0;
};

// 0, 1, ..., n-1 (torch's SequentialSampler).
class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t dataset_size);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t n_;
};

// A permutation of 0..n-1 drawn from (seed, epoch) (torch's RandomSampler
// without replacement). See Note [Epoch shuffling].
class RandomSampler final : public Sampler {
 public:
  explicit RandomSampler(int64_t dataset_size, uint64_t seed = 0);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

// One rank's shard of the dataset, with torch's DistributedSampler
// semantics: the (optionally shuffled) indices are made a multiple of
// num_replicas, by repeating indices from the front (drop_last = false; a few
// examples are then seen twice per epoch) or by dropping the tail (drop_last
// = true), and rank r takes positions r, r + num_replicas, r + 2 *
// num_replicas, ... So shards are disjoint, cover the dataset, and every rank
// yields size() indices: the same number of steps everywhere, which DDP's
// collectives need. See Note [Epoch shuffling].
class DistributedSampler final : public Sampler {
 public:
  // ValueError: dataset_size < 0, num_replicas < 1, rank outside
  // [0, num_replicas), or drop_last with fewer examples than replicas.
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);
  int64_t size() const override { return per_rank_; }
  std::vector<int64_t> indices() const override;
  // Indices over all ranks after padding or dropping (num_replicas * size()).
  int64_t total_size() const { return per_rank_ * replicas_; }
  int num_replicas() const { return replicas_; }
  int rank() const { return rank_; }

 private:
  int64_t n_;
  int replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t per_rank_;
};

// A uniform random permutation of 0..n-1, a pure function of (seed, n)
// (Fisher-Yates on Philox draws). What the shuffled samplers use, with seed
// mixed with the epoch.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed);

}  // namespace ddp::data
