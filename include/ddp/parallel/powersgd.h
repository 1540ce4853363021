#pragma once
// PowerSGD gradient compression as a DDP communication hook (Vogels,
// Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression
// for Distributed Optimization", NeurIPS 2019), with the semantics of
// torch.distributed's powerSGD_hook. See docs/powersgd.md.
//
//   auto hook = parallel::powersgd_hook({.matrix_approximation_rank = 4,
//                                        .start_powerSGD_iter = 100});
//   ddp_model.register_comm_hook(hook);
//
// Each gradient of a bucket is viewed as an n x m matrix M (n = its first
// dimension). Those where a rank-r factorisation M ~ P Q^T (P: n x r,
// Q: m x r) moves at least min_compression_rate times fewer elements are
// compressed; the rest (biases, norms, small layers) are summed exactly in one
// flat allreduce. For the compressed ones, one power-iteration step:
//   P = M Q;  allreduce(P);  orthogonalise P;  Q = M^T P;  allreduce(Q);
//   M <- P Q^T / world_size.
// Every rank ends with the same gradients.
//
// Note [PowerSGD error feedback]
// The rank-r result drops part of each gradient. With error feedback each
// rank keeps that part (its input minus the result it got back) per bucket
// and adds it to the next iteration's gradient, so nothing is lost for good,
// only delayed. Only compressed tensors keep an error: for an exactly
// averaged tensor, local minus average sums to zero over the ranks, so
// feeding it back changes no result while the memory would grow with every
// step (torch keeps it for the whole bucket; the gradients are the same).
//
// Note [PowerSGD warm start]
// One power-iteration step from a random Q is a poor factorisation; from
// last iteration's Q (gradients change slowly) it is a good one. With
// warm_start, Q is kept per bucket and re-orthogonalised each iteration;
// without it a fresh random Q is drawn every time. The random Q comes from
// a Generator seeded with `seed`: every rank draws the same Q, which the
// allreduce of P = M Q needs.
//
// Note [PowerSGD state and bucket rebuilds]
// State (error, P, Q) is kept per bucket index. DDP rebuilds its buckets
// once, at the forward after the first synchronised backward (Note
// [Rebuilding buckets]); state remembered before that would describe other
// tensors. So, like torch, start_powerSGD_iter must be at least 2 when error
// feedback or warm start is on: the hook allreduces plainly until then and
// keeps no state. If a bucket's layout (the shapes, dtype or device of its
// gradients) still changes after PowerSGD began, the hook raises rather than
// apply an error that belongs to other tensors.
//
// Note [PowerSGD chaining]
// P must be summed before Q = M^T P can be computed, so each compressed
// bucket needs a second collective. Starting it at the end of backward
// puts every bucket's Q round trip after the last gradient. Instead, each
// hook call first finishes the previous bucket's first half (waits for its
// summed P, orthogonalises it, computes Q and starts the Q allreduce), and
// only then starts its own collectives; the last bucket's Q starts in its
// finish step. The wait is short: P is small, and it was started one bucket
// earlier. The rule depends only on the launch order, which is the same on
// every rank, so every rank issues exact, P, then (at the next launch) Q
// per bucket, in bucket order. That is also the order a rank that joined
// (Join) issues, as it finishes each shadow bucket before the next.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "ddp/parallel/comm_hooks.h"
#include "ddp/tensor/ordered_dict.h"
#include "ddp/tensor/generator.h"

namespace ddp::parallel {

struct PowerSGDOptions {
  // r: the rank of the approximation. Higher is more accurate and moves more
  // bytes: (n + m) * r elements instead of n * m per compressed matrix.
  int matrix_approximation_rank = 1;
  // Iterations (synchronised backward passes) run as plain allreduce first.
  // Must be >= 2 with error feedback or warm start (see above).
  int64_t start_powerSGD_iter = 1000;
  // Compress a matrix only when n * m > (n + m) * r * min_compression_rate.
  // 1-D gradients (n x 1) never pass. Must be >= 1.
  double min_compression_rate = 2.0;
  bool use_error_feedback = true;  // Note [PowerSGD error feedback]
  bool warm_start = true;          // Note [PowerSGD warm start]
  // Added to each column norm in the orthogonalisation (torch's
  // orthogonalization_epsilon). With 0, an all-zero column stays zero
  // instead of becoming NaN.
  double orthogonalization_epsilon = 0.0;
  uint64_t seed = 0;  // of the random initial Q; the same on every rank
};

// Raises ValueError naming the first bad option.
void validate(const PowerSGDOptions& options);

// The hook's state: shared by the copies of the hook, readable by tests and
// for logging. One state serves one DDP model (one process group).
class PowerSGDState {
 public:
  explicit PowerSGDState(PowerSGDOptions options);  // validates

  const PowerSGDOptions& options() const { return options_; }
  // Synchronised backward passes seen so far (counted at the last bucket).
  int64_t iteration() const;
  // Elements the compressed buckets held, and elements sent for them, over
  // every compressed iteration so far; rate = before / after (0 if none).
  int64_t numel_before_compression() const;
  int64_t numel_after_compression() const;
  double compression_rate() const;

  // Copies of the per-bucket memory (undefined when the bucket has none):
  // the residual of the compressed tensors, flat, in bucket order; the
  // current Q (and P) factors, flat, in bucket order.
  Tensor error(int bucket_index) const;
  Tensor q_memory(int bucket_index) const;
  Tensor p_memory(int bucket_index) const;

  // Sets the Q the next compressed step of this bucket starts from, instead
  // of a random one (flat, the m x r factors of its compressed matrices in
  // bucket order): to reproduce another implementation's run, or to restore
  // one. Needs warm_start; call it before that step, with the same Q on
  // every rank. A Q of the wrong size raises ValueError at that step.
  void set_q_memory(int bucket_index, const Tensor& q);

  // Note [PowerSGD checkpoints]
  // Everything a resumed run needs to continue bit for bit: the iteration
  // count, the compression statistics, the generator of the random Q (seed
  // and offset), and per bucket its error memory, its Q (warm start) and the
  // shapes of the gradients they belong to, as "bucket.<b>.error",
  // "bucket.<b>.q" and "bucket.<b>.shapes". The error memory is this rank's
  // own (the residual of its local gradient), so every rank saves and loads
  // its own state: add it to an io::Checkpoint as a per-rank section with
  // parallel::add_checkpoint_section (ddp/parallel/checkpoint_sections.h).
  // load_state_dict checks the options that size the memory (rank, error
  // feedback, warm start) and every tensor before it changes anything
  // (ValueError naming the first problem); a restored bucket's memory moves
  // to the gradients' device at its first step, and one whose gradients no
  // longer match its shapes raises there, as after a bucket rebuild.
  TensorDict state_dict() const;
  void load_state_dict(const TensorDict& dict);

  // Note [PowerSGD in an elastic job]
  // After a membership change (parallel::ElasticGroup) every member calls
  // this with the state_dict() of rank 0 of the new generation: the
  // iteration count, statistics and random generator are taken from it, and
  // every bucket's memory is dropped, also on the members that had their
  // own. The error memory is each rank's residual of a gradient summed over
  // the old membership, and DDP's reset_group makes fresh buckets, which are
  // rebuilt once more (Note [PowerSGD state and bucket rebuilds]); so, as at
  // the start, the next two iterations are plain allreduces and compression
  // resumes from fresh memory. Every member then holds the same state, and
  // the replicas stay bit-identical. What is lost: the residuals not yet fed
  // back (at most one step's compression error per rank). ValueError as
  // load_state_dict; nothing changes then.
  void load_peer_state(const TensorDict& dict);

  // The hook's body; use powersgd_hook() to get a CommHook.
  BucketWork run(dist::ProcessGroup& group, GradBucket& bucket);

 private:
  struct Bucket;
  struct Step;
  BucketWork compress(dist::ProcessGroup& group, GradBucket& bucket);
  void start_pending_q();  // Note [PowerSGD chaining]

  PowerSGDOptions options_;
  Generator generator_;
  mutable std::mutex mu_;
  int64_t iteration_ = 0;
  int64_t resume_at_ = 0;  // Note [PowerSGD in an elastic job]: plain before this iteration
  int64_t numel_before_ = 0;
  int64_t numel_after_ = 0;
  std::map<int, std::shared_ptr<Bucket>> buckets_;
  std::shared_ptr<Step> pending_;  // launched, its Q half not yet started
};

// A CommHook running PowerSGD with its own state.
CommHook powersgd_hook(PowerSGDOptions options = {});
// The same over a state the caller keeps (to read its statistics).
CommHook powersgd_hook(std::shared_ptr<PowerSGDState> state);

}  // namespace ddp::parallel
