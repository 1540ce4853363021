#pragma once
// ZeRO-1 inside DistributedDataParallel: a sharded optimizer (the idea of
// torch's ZeroRedundancyOptimizer, DeepSpeed's stage 1 and Megatron's
// distributed optimizer), overlapped with backward.
//
//   DDPOptions o;  o.rebuild_buckets = false;          // the shards follow the buckets
//   DistributedDataParallel ddp_model(model, world.group, o);
//   parallel::ZeroRedundancyOptimizer opt(ddp_model, parallel::zero_adamw(1e-3, {}));
//   for (...) {
//     Tensor loss = loss_fn(ddp_model(x), y);   // waits for the parameters
//     loss.backward();                           // reduce-scatters each bucket
//     opt.clip_grad_norm_(1.0);                  // optional: the global norm
//     opt.step();                                // steps the shard, all-gathers
//     opt.zero_grad();
//   }
//
// Note [ZeRO-1 shards]
// Each gradient bucket of the Reducer (Note [Gradient buckets]) is a flat
// buffer of B elements. Padded to a multiple of the world size N it splits
// into N chunks of c = ceil(B / N); rank r owns chunk r of every bucket. A
// communication hook replaces the bucket's allreduce by a reduce-scatter, so
// as each bucket becomes ready during backward its averaged chunk lands on
// its owner (half the bytes of an allreduce leave each rank). The chunk
// covers pieces ("segments") of one or more parameters; each segment is a
// flat view of the parameter's own memory, in memory order whatever its
// dense layout (a channels-last weight's gradient lies in its bucket in that
// same order), and a local SGD or AdamW steps
// exactly those segments with the fused multi-tensor step, so optimizer
// state exists for 1/N of the elements only. The updated chunks are then
// all-gathered per bucket, asynchronously and in place, into the bucket's
// buffer (or a padded scratch when N does not divide B), and the other
// ranks' pieces are copied into the parameters when the next forward starts
// (a forward pre-hook of DDP; per layer with overlap_with_forward, Note
// [ZeRO-1 overlapped with the forward]) or when synchronize_parameters() is
// called (Note [ZeRO-1 copies]). Every element of a parameter gets the
// same update on its owner as plain DDP would make, so the trajectory equals
// plain DDP's up to the rounding of the averaged gradient.
//
// Because the shards follow the buckets, the buckets must not change: the
// wrapped DDP must run with rebuild_buckets = false (and without
// find_unused_parameters, whose undefined gradients a shard cannot express).
// After backward the model's own .grad hold nothing useful (they are zeroed
// at the next forward); the averaged gradients are the shard's
// (param_groups()[0].params[k].grad()).
//
// Note [ZeRO-1 copies]
// Plain DDP touches each gradient element a few times per step (accumulate,
// allreduce, optimizer); ZeRO-1 must not add whole-model passes on top, or
// at one or two ranks, where the link is cheap, it loses to plain DDP on
// memory traffic alone. So per step and bucket:
// - reduce-scatter: the bucket buffer's chunks are the input as they are
//   (no packing unless N does not divide the bucket) and the average lands
//   in the rank's grad_chunk; at N = 1 there is no collective at all and the
//   shard's gradients are views of the bucket buffer itself;
// - all-gather: the rank's updated segments are copied once, into its own
//   slot of the gather target (the bucket buffer, or the padded scratch),
//   and the all-gather fills the other slots in place, so there is no send
//   buffer; at N = 1 there is no all-gather (the step wrote the parameters);
// - copy back: only the other ranks' pieces are copied into the parameters;
//   this rank's pieces are there already, since its segments are views of
//   the parameters' own memory.
// What remains is 1/N of the parameters packed, (N-1)/N copied back, and
// the buffer zeroed before the next backward accumulates into it. Letting
// the parameters live in the bucket buffers (no copy back at all) would need
// a leaf's storage to be replaced under the module, which Tensor does not
// offer safely.

// Note [ZeRO-1 overlapped with the forward]
// With ZeroOptions::overlap_with_forward the all-gather is no longer waited
// for as a whole when the next forward starts. What changes in the order of
// work:
// - step() steps the shard bucket by bucket, in the order the next forward
//   needs the buckets (the last bucket of backward, which holds the first
//   layers, first), and issues each bucket's all-gather as soon as that
//   bucket's shard is stepped, while the next bucket is being stepped;
// - every module that owns parameters gets a forward pre-hook (Note
//   [Forward hooks]) that waits only for the all-gathers of the buckets
//   holding its own parameters, copies the other ranks' pieces in and zeroes
//   those buckets for the next accumulation; the later layers' all-gathers
//   go on behind the earlier layers' compute. At the end of the DDP forward
//   the buckets no layer asked for are finished too, so the next backward
//   never reduce-scatters a buffer an all-gather still writes.
// What never changes: which collectives are issued and in which order on
// every rank (the reduce-scatters in bucket order during backward; the
// all-gathers in reverse bucket order inside step(), a function of the
// bucket plan only, never of completion times), and the update of every
// element (SGD and AdamW step each segment on its own, so stepping the
// shard bucket by bucket is bit for bit stepping it at once). The step
// itself stays in step(): clipping and GradScaler's skip need the whole
// shard's gradients (and a collective over all ranks) before any element
// is updated, so it cannot be taken inside backward without changing what
// the user's loop means. f64 parameters, sharded_state_dict() and
// state_dict() equal those without the option bit for bit. Not with
// fault_tolerant (a failed all-gather would surface inside a layer of the
// forward, some layers updated and others not); Join is refused for every
// ZeRO-1 model (DistributedDataParallel::join_refusal).
//
// Note [ZeRO-1 with GradScaler and clipping]
// A GradScaler unscales only this rank's shard, so it would decide alone
// whether to skip the step; found_inf_anywhere() (an Optimizer hook that the
// scaler calls) ORs the flag across ranks, so all ranks skip together.
// clip_grad_norm_() sums |g|^p over the shard and allreduces the sum (max
// for p = inf), so every rank clips with the global norm of plain DDP.
//
// Note [ZeRO-1 checkpoints]
// sharded_state_dict() holds this rank's optimizer state in the layout of
// the local optimizer, keyed by segment, plus where each segment lies
// (zero.segments: parameter number, offset, length) and the parameter sizes.
// load_sharded_state_dict() takes the shards of all ranks of the saving job,
// at any world size: it reassembles each parameter's state, checks that
// every element is covered exactly once, and keeps the pieces of its own
// segments, so a job saved at 2 ranks resumes at 3 or 4. In an
// io::Checkpoint the shards are a per-rank section
// (parallel::add_checkpoint_section, ddp/parallel/checkpoint_sections.h),
// beside the model and the rest in one manifest; save_shard / load_shards
// keep a directory of shards of their own.
//
// Note [ZeRO-1 checkpoints across layouts]
// Segments count a parameter's elements in its memory order (Note [ZeRO-1
// shards]), so a shard also records each parameter's dim order (outermost
// to innermost in memory, zero.dim_orders). A job that loads shards saved
// in another layout (contiguous into channels-last, or the reverse)
// re-lays each reassembled state into its own order before cutting its
// segments, so the resumed trajectory is the same whatever the layouts.

//
// Note [ZeRO-1 in an elastic job]
// Under parallel::ElasticGroup (Note [Elastic per-rank state] in
// ddp/parallel/elastic.h) the optimizer is a per-rank section of the state
// (add_checkpoint_section) and its apply finishes the all-gather
// (synchronize_parameters()), so that a committed step leaves every
// parameter updated on every member. After a membership change and DDP's
// reset_group, the members that held the job's state send their shards,
// with the values of their segments (peer_shard()), and every member calls
// load_peer_shards(): the shards are cut anew for the DDP's new group and
// buckets, each sender's segment values are written into the parameters
// (the same writes, in the same order, on every member), and the optimizer
// state is reassembled as in a checkpoint load. So:
//  - after a join (nobody lost) the state is complete: the trajectory is
//    the one plain DDP would take with the same membership;
//  - after a loss, the lost members' shards are gone. Their elements'
//    optimizer state restarts from zero (momentum, AdamW's moments; for SGD
//    without dampening a zero buffer is exactly a fresh one), the rest is
//    kept; if a member died inside the last step's all-gather, its
//    elements keep the values rank 0 of the new generation has, which rank 0
//    sends everyone before the shards are loaded. Every replica stays
//    bit-identical either way.
// Keeping a lost shard would need a second copy of every shard on another
// rank (twice the optimizer memory and a transfer per step); a job that
// must not lose momentum at a loss uses plain DDP's replicated optimizer.
// The reduce-scatter hook refuses a group it was not cut for, so a
// reset_group without the section is named, not silently wrong.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/optim/adamw.h"
#include "ddp/optim/optimizer.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/distributed.h"

namespace ddp::parallel {

struct ZeroShared;

struct ZeroOptions {
  // Note [ZeRO-1 overlapped with the forward]: step() issues each bucket's
  // all-gather as soon as its shard is stepped (first layers first), and
  // the next forward waits per layer for its own buckets only.
  bool overlap_with_forward = false;
};

// Builds the optimizer that steps one rank's shard, over the groups given
// (one group of flat parameter segments). Only SGD and AdamW are supported:
// their update is elementwise, so stepping a piece of a parameter is the
// same as stepping the whole.
using LocalOptimizerFactory =
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;
LocalOptimizerFactory zero_sgd(double lr, optim::SGDOptions options = {});
LocalOptimizerFactory zero_adamw(double lr = 1e-3, optim::AdamWOptions options = {});

// One piece of a parameter owned by this rank.
struct ZeroSegment {
  size_t param = 0;    // index among the DDP's trainable parameters
  int64_t offset = 0;  // first element, in the flattened parameter
  int64_t length = 0;
  size_t bucket = 0;        // the bucket it lies in
  int64_t chunk_offset = 0;  // its position in this rank's chunk of the bucket
};

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  // Registers a communication hook and a forward pre-hook on ddp (which must
  // outlive the optimizer's use); with options.overlap_with_forward also a
  // forward pre-hook on every module that owns parameters and a forward
  // post-hook on ddp. ValueError: rebuild_buckets or
  // find_unused_parameters on, a
  // factory that builds anything but SGD or AdamW, or a rank whose shard is
  // empty (a model smaller than the world size); with overlap_with_forward,
  // fault_tolerant on or a DDP that overlaps its step (overlap_step). It
  // replaces any comm hook registered before.
  template <class M>
  ZeroRedundancyOptimizer(DistributedDataParallel<M>& ddp, LocalOptimizerFactory make_local,
                          ZeroOptions options = {})
      : ZeroRedundancyOptimizer(ddp, ddp.module(), trainable_parameters(ddp.module()),
                                std::move(make_local), options) {}
  // With overlap_with_forward: waits for the last step's all-gathers (so
  // the parameters are complete) and removes the layers' pre-hooks.
  ~ZeroRedundancyOptimizer() override;

  // Waits for the all-gather started by the last step() and copies the
  // updated parameters into the model. The next forward does it on its own.
  void synchronize_parameters();

  // The global gradient norm across all shards (see Note [ZeRO-1 with
  // GradScaler and clipping]); the same arguments and result as
  // optim::clip_grad_norm_ over the whole model under plain DDP. A collective.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);

  // See Note [ZeRO-1 checkpoints].
  TensorDict sharded_state_dict() const;
  void load_sharded_state_dict(const std::vector<TensorDict>& shards);
  // Note [ZeRO-1 in an elastic job]: sharded_state_dict() and the values of
  // this rank's segments ("zero.values.<k>"); and the load of such shards
  // from the surviving members after DDP's reset_group, some of the saving
  // generation's shards possibly missing. ValueError while an all-gather is
  // still in flight (apply must call synchronize_parameters()), or for
  // shards of another model; nothing is changed then.
  TensorDict peer_shard() const;
  void load_peer_shards(const std::vector<TensorDict>& shards);
  // Files: <dir>/zero_shard_<rank>_of_<world>.safetensors, one per rank.
  void save_shard(const std::string& dir) const;
  // Reads every shard file of the one world size found in dir.
  void load_shards(const std::string& dir);

  const std::vector<ZeroSegment>& segments() const;
  const ZeroOptions& options() const;
  // Note [ZeRO-1 overlapped with the forward], for tests and benchmarks: the
  // buckets whose all-gather was issued and not yet waited for, in bucket
  // order; and the buckets in the order the last step() issued them.
  std::vector<size_t> pending_gathers() const;
  std::vector<size_t> last_gather_order() const;
  // Bytes of optimizer state (momentum, moments, step counts) on this rank.
  size_t state_bytes() const;
  optim::Optimizer& local_optimizer();

  bool found_inf_anywhere(bool local_found_inf) override;

 protected:
  void update_group(const optim::ParamGroup& group, const Tensors& params, const Tensors& grads,
                    const std::vector<TensorDict*>& states) override;
  TensorDict options_state() const override;
  void load_options(const TensorDict& options) override;
  std::vector<std::string> state_names() const override;

 private:
  ZeroRedundancyOptimizer(DistributedDataParallelBase& ddp, nn::Module& module, Tensors params,
                          LocalOptimizerFactory make_local, ZeroOptions options);
  ZeroRedundancyOptimizer(std::shared_ptr<ZeroShared> shared, LocalOptimizerFactory make_local);
  static Tensors trainable_parameters(nn::Module& module);
  Device segments_device() const;

  // Reassembles the shards' state into local_; `partial`: shards of lost
  // ranks may be missing (their elements' state restarts from zero).
  void load_shards_into_local(const std::vector<TensorDict>& shards, bool partial);

  std::shared_ptr<ZeroShared> shared_;  // also held by the hooks
  LocalOptimizerFactory make_local_;
  std::unique_ptr<optim::Optimizer> local_;
  ZeroOptions options_;
  std::vector<nn::HookHandle> layer_hooks_;  // Note [ZeRO-1 overlapped with the forward]
};

// Optimizer-state bytes of any optimizer (for comparing plain with ZeRO).
size_t optimizer_state_bytes(const optim::Optimizer& opt);

}  // namespace ddp::parallel
