#pragma once
// Join: training with uneven inputs (the twin of PyTorch's
// torch.distributed.algorithms.Join with its DDP hook).
//
//   parallel::Join join({&ddp_model}, {.throw_on_early_termination = false});
//   join.run([&] {
//     for (auto& [x, y] : my_loader) {   // each rank may have a different count
//       opt.zero_grad();
//       loss_fn(ddp_model(x), y).backward();
//       opt.step();
//     }
//   });
//
// Note [Join]
// Collectives match by order, so a rank that runs out of batches early
// would leave the others waiting in their next gradient allreduce forever.
// Inside a join scope each training forward of the (first) model starts with
// one small allreduce: every rank still in its loop contributes "I am here"
// (a one-hot vector by rank), whether this iteration synchronises gradients,
// and whether a bucket rebuild is due. A rank whose body has returned keeps
// answering that allreduce with zeros, and as long as some rank is still
// here it shadows the collectives of one iteration of theirs:
//  - the bucket rebuild, when due (Note [Rebuilding buckets]);
//  - the buffer broadcast, from the highest rank still in its loop (its
//    buffers are the freshest), which the others broadcast from too;
//  - the SyncBatchNorm statistics allreduces of its own last iteration, with
//    zero counts and sums (so the others' statistics are those of their
//    samples only). For that the others launch their buckets at the end of
//    backward while a join scope is active and the model issued
//    SyncBatchNorm collectives, so that their backward's collectives come in
//    a fixed order (SyncBatchNorm's first, then the buckets);
//  - every gradient bucket (through the comm hook) with zeros, on a staging
//    buffer, and the used-flags allreduce with no flag set.
// The averaging divides by the full world size, as PyTorch's default
// (divide_by_initial_world_size = true): a rank without inputs counts as a
// rank with zero gradient. With false, the average is over the ranks that
// still had inputs in that iteration.
// When every rank has returned, all take the parameters and buffers of the
// rank that joined last (its model took every step).
// With throw_on_early_termination, the first time a rank runs out every
// rank raises instead (the others from that iteration's first allreduce).
// GradScaler needs nothing: its inf/NaN check reads gradients that are
// already averaged, so every rank sees the same verdict and there is no
// collective of its own to shadow.

#include <functional>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/tensor/tensor.h"

namespace ddp::parallel {

class Join;

// Note [Joinable]
// What Join needs of a model it keeps in step: the group and device of the
// per-iteration allreduce, whether it can be shadowed at all, and the four
// steps of Note [Join] that only the model knows how to take. Join talks to
// its models through this interface alone (DistributedDataParallelBase
// implements it), so join.h does not depend on the DDP engine that uses it.
class Joinable {
 public:
  virtual ~Joinable() = default;

  // The group of the per-iteration allreduce (every model of one Join uses
  // the same) and the device of its tensor.
  virtual dist::ProcessGroup& join_process_group() = 0;
  virtual Device join_device() const = 0;
  // Empty when the model can enter a join scope now; otherwise why not,
  // worded to follow "Join: model <k> " (e.g. "has a forward pre-hook ...").
  virtual std::string join_refusal() const = 0;
  // Set by a join scope around the training loop (nullptr when it ends).
  virtual void set_join_context(Join* join) = 0;
  // The body of the join scope returned: this rank's last iteration is complete.
  virtual void join_close_iteration() = 0;
  // Shadows one iteration of the ranks that still have inputs: the buffer
  // broadcast (from `buffer_root`), a due bucket rebuild and the gradient
  // collectives, with zeros. `syncing`: whether their iteration synchronises.
  virtual void join_shadow_iteration(bool syncing, bool rebuild, int buffer_root) = 0;
  // After all ranks joined: take the parameters and buffers of `root` (the
  // last rank to join, whose model saw every step).
  virtual void join_final_sync(int root) = 0;
};

struct JoinOptions {
  // false: run the body as is (no allreduce per iteration, no shadowing).
  bool enable = true;
  // Raise on every rank as soon as one rank runs out of inputs.
  bool throw_on_early_termination = false;
  // Average over the full world size (PyTorch's default) or over the ranks
  // that still had inputs in the iteration.
  bool divide_by_initial_world_size = true;
};

class Join {
 public:
  // models: the DDP models trained in the body; all on the same group, the
  // same list on every rank. Raises ValueError for an empty list, a null
  // model, models on different groups, or a model that refuses
  // (Joinable::join_refusal).
  explicit Join(std::vector<Joinable*> models, JoinOptions options = {});
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // Runs the training loop, then shadows the others until every rank is
  // done, then brings every rank to the same model. An exception from the
  // body propagates at once (the other ranks will then time out, as with
  // any rank that fails).
  void run(const std::function<void()>& body);

  // ---- for DistributedDataParallel (Note [Join]) ----------------------------
  struct Notice {
    int active = 0;       // ranks still in their loop this iteration
    int root = 0;         // the highest of them: buffers come from it
    double grad_scale = 1.0;
  };
  // At a training forward of `model`: the per-iteration allreduce (only the
  // first model issues it; the others get its result).
  Notice notify(Joinable& model, bool syncing, bool rebuild);
  const JoinOptions& options() const { return options_; }

 private:
  void shadow_until_all_joined();

  std::vector<Joinable*> models_;
  JoinOptions options_;
  Notice last_;
  int last_root_ = -1;
};

// SyncBatchNorm calls this before each of its statistics allreduces, so that
// a rank that joined can repeat them (Note [Join]). A no-op outside a join
// scope.
void note_collective_for_join(dist::ProcessGroup& group, const Tensor& tensor);

// What note_collective_for_join records: enough to issue the same
// allreduce with zeros.
struct JoinCollective {
  dist::ProcessGroup* group = nullptr;
  Shape shape;
  DType dtype = DType::f32;
  Device device;
};

namespace detail {
// The log the current thread's collectives are noted into (nullptr: none).
void set_join_log(std::vector<JoinCollective>* log);
}  // namespace detail

}  // namespace ddp::parallel
