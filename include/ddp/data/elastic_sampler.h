#pragma once
// ElasticSampler: the sampler of fault-tolerant (elastic) DDP, whose world
// size may change in the middle of an epoch (a rank dies, a replacement
// joins). See Note [Elastic re-partition].
//
// Note [Elastic re-partition]
// The epoch's order is a pure function of (seed, epoch, dataset size): the
// permutation of Note [Epoch shuffling] (random_permutation(n, seed +
// epoch), as DistributedSampler), or 0..n-1 unshuffled. Every rank of every
// world computes the same order without communicating. The only state is the
// position: how many samples of that order committed steps have consumed.
//
// The rule. A step of a world of W ranks takes the next
//   G = min(W * batch_per_rank, n - position)
// samples of the order, order[position, position + G); rank r takes the
// slice's positions r, r + W, r + 2W, ... (the strided split of
// DistributedSampler). Every rank gets ceil(G / W) entries; the entries past
// a rank's real ones are padding: weight 0 and an index repeated from the
// slice (slice position j >= G takes the slice's j mod G), so batch shapes
// are the same on every rank and no rank is ever empty. When the step
// COMMITS, position += G. A step that fails (a rank lost during it) is not
// advanced: whatever world comes next redoes it from the same position, with
// its own W.
//
// Why nothing is dropped or used twice. The committed steps consume
// consecutive, disjoint slices of one fixed order, so after any sequence of
// world sizes and failed steps the committed real samples are exactly the
// prefix order[0, position), each once; the epoch ends when position == n,
// i.e. with every sample used exactly once. A failed step's samples are not
// in the prefix, so redoing them is not a second use (their gradients were
// discarded with the failed reduction). Within a step the W ranks' real
// entries partition the slice (r + kW hits each j < G once). A world change
// therefore needs no re-shuffle and no message beyond (epoch, position),
// which a joining rank receives with the rest of the state (state_dict()).
//
// Padding happens only when G < W * batch_per_rank, i.e. only in the epoch's
// last step (G = n - position then, and the epoch is done after it), and
// only on the ranks whose strided share is short; at most one padding entry
// per rank. A padding entry has weight 0: with the loss weighted as in
// elastic_loss_scale() it contributes nothing to the loss or, directly, to
// the gradients. But padding samples still pass through forward: a
// BatchNorm in training mode normalizes them with the others, so they enter
// that step's batch statistics (and, with SyncBatchNorm, the global ones) and
// its running_mean / running_var, and through those statistics they change
// the real samples' outputs and gradients a little. They are copies of real
// samples of the same step, so the bias is small and confined to the last
// step of an epoch. A model that must be exact there can skip the running
// statistics update for that step, or mask the padding out of its
// normalization.

#include <cstdint>
#include <vector>

#include "ddp/tensor/ordered_dict.h"

namespace ddp::data {

// One step's share of one rank (ElasticSampler::batch).
struct ElasticBatch {
  std::vector<int64_t> indices;  // dataset indices for this rank
  std::vector<float> weights;    // 1 for a real sample, 0 for padding (same length as indices)
  int64_t global_count = 0;      // G: real samples in this step over all ranks
  // Real samples of this rank (the weights that are 1).
  int64_t local_count() const;
};

class ElasticSampler {
 public:
  // ValueError for dataset_size < 1 or batch_per_rank < 1.
  ElasticSampler(int64_t dataset_size, int64_t batch_per_rank, bool shuffle = true,
                 uint64_t seed = 0);

  // Selects the epoch (>= 0, else ValueError) and moves the position back to
  // its start, also for the epoch already selected.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  // Samples of this epoch consumed by committed steps, in [0, dataset_size].
  int64_t position() const { return position_; }
  int64_t remaining() const { return n_ - position_; }
  bool epoch_done() const { return position_ == n_; }

  // The next step's share of `rank` in a world of `world` ranks, by the rule
  // of Note [Elastic re-partition]. Changes nothing: call it again (with any
  // world) to redo a step that failed. ValueError when world < 1, rank is
  // outside [0, world), or the epoch is done.
  ElasticBatch batch(int rank, int world) const;
  // The next step's G for a world of `world` ranks (ValueError as batch()).
  int64_t step_count(int world) const;
  // After a COMMITTED step of a world of `world` ranks: position += that
  // step's G. Never call it for a failed step. ValueError as batch().
  void advance(int world);
  // Steps until the epoch is done if the world stays at `world` ranks (0
  // when it is done; ValueError for world < 1).
  int64_t steps_left(int world) const;

  // The current epoch's order (all of it, consumed or not).
  const std::vector<int64_t>& order() const { return order_; }
  int64_t dataset_size() const { return n_; }
  int64_t batch_per_rank() const { return batch_; }
  bool shuffle() const { return shuffle_; }
  uint64_t seed() const { return seed_; }

  // For checkpoints and for a joining rank's transfer from a healthy peer:
  // {"epoch", "position", "dataset_size", "batch_per_rank", "seed",
  // "shuffle"}, each a 0-dim i64 tensor (the seed's 64 bits as a signed
  // integer).
  TensorDict state_dict() const;
  // Checks everything first and then takes the epoch and position: a missing
  // or unexpected key, a value that is not one integer, an epoch < 0 or a
  // position outside [0, dataset_size], and a dataset_size, batch_per_rank,
  // seed or shuffle that differs from this sampler's raise ValueError naming
  // the key (and both values) and change nothing.
  void load_state_dict(const TensorDict& state);

 private:
  void fill_order();

  int64_t n_;
  int64_t batch_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> order_;
};

// The factor that makes DDP's gradient average the gradient of the mean loss
// over the step's real samples: world / global_count. Each rank computes
//   loss = elastic_loss_scale(b, world) * sum_i(b.weights[i] * l_i)
// with l_i the per-sample loss (reduction "none"). DDP averages the W ranks'
// gradients, (1/W) * sum_r grad(loss_r) = (1/G) * sum over the step's real
// samples of grad(l_i): padding (weight 0) drops out, and every real sample
// counts once whatever the world size. In a full step (G = W * batch) the
// factor is 1 / batch_per_rank, i.e. the usual per-rank mean. ValueError for
// world < 1 or a batch with global_count < 1.
float elastic_loss_scale(const ElasticBatch& batch, int world);

}  // namespace ddp::data
