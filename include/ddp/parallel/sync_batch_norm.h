#pragma once
// SyncBatchNorm: BatchNorm2d whose training-mode statistics are those of the
// global batch, i.e. of every rank's samples together (the twin of
// torch.nn.SyncBatchNorm). With N ranks holding slices of one batch, the
// outputs, the input gradients and the summed weight/bias gradients are
// those of nn::BatchNorm2d on the whole batch in one process, and so are
// the running statistics. In eval mode, or on a group of one rank, it is
// exactly nn::BatchNorm2d.
//
//   auto world = dist::init_process_group();
//   auto bn = std::make_shared<parallel::SyncBatchNorm>(64, world.group);
//
// Every rank of the group must run the same SyncBatchNorm layers in the same
// order, forward and backward (each training forward and each backward is a
// collective), and every rank must be in the same mode.
//
// Note [Synchronised batch statistics]
// Forward: each rank reduces its slice to per-channel count n_r, mean m_r
// and biased variance v_r (in two passes: the mean, then the mean square of
// the deviations from it, so no cancellation inside a rank), and turns
// them into the sums
// S1 = n_r·m_r and S2 = n_r·(v_r + m_r²) *in f64*; one allreduce of
// [S1 (C), S2 (C), n (1)] gives the global mean S1/n and biased variance
// S2/n − mean². Doing the subtraction in f64 keeps it exact enough for f32
// activations whose mean is far larger than their spread (a raw f32
// sum-of-squares would lose the variance to cancellation), while costing one
// small allreduce, not torch's allgather of every rank's statistics. Ranks
// may hold different numbers of samples (even none); only the global count
// must exceed one.
// Backward: with x̂ = (x − mean)·invstd, one allreduce of the per-channel
// [Σdy, Σdy·x̂] over all ranks gives
//   dx = w·invstd·(dy − Σdy/n − x̂·Σ(dy·x̂)/n),
// the gradient of the global batch norm restricted to this rank's slice.
// dweight = Σdy·x̂ and dbias = Σdy stay local to the rank: summing them over
// ranks (what DistributedDataParallel's gradient allreduce does, up to its
// division by the world size) gives the global batch's gradients. The
// backward allreduce happens only when the input needs a gradient, which is
// the same on every rank of one model.
// Computation is in f32 (f64 for f64 inputs; f16/bf16 inputs are computed
// in f32 and the output cast back, or left in f32 under autocast, which
// applies batch_norm's policy), on the input's device, with ddp's tensor
// ops; the collectives take device tensors (staged through host memory on
// mpi and gloo).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ddp/dist/process_group.h"
#include "ddp/nn/batch_norm.h"
#include "ddp/nn/module.h"

namespace ddp::parallel {

// Batch normalisation over the channel dim of x [N, C, *] with the
// statistics of the global batch on `group` (Note [Synchronised batch
// statistics]); a collective. running_mean/var, when defined, are updated
// in place with `momentum` (running = (1 − momentum)·running +
// momentum·value, the variance unbiased with the global count, as torch).
// weight/bias may be undefined (1 / 0). ShapeError for a rank below 2 or
// per-channel tensors that are not [C]; DTypeError for a non-floating x;
// ValueError when the global batch has a single value per channel (on every
// rank alike). At world size 1 it still reduces through `group` (a no-op);
// SyncBatchNorm uses nn::functional::batch_norm there instead.
Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, double momentum, double eps,
                       const std::shared_ptr<dist::ProcessGroup>& group,
                       const std::string& who = "");

// nn::BatchNorm2d's parameters ("weight", "bias"), buffers ("running_mean",
// "running_var", "num_batches_tracked") and options, with training-mode
// statistics over `group`. It is a BatchNorm2d, so it fits wherever one is
// held (a model's std::shared_ptr<nn::BatchNorm2d> member) and its state
// dict loads into one and back.
class SyncBatchNorm : public nn::BatchNorm2d {
 public:
  // ValueError for a null group or num_features <= 0.
  SyncBatchNorm(int64_t num_features, std::shared_ptr<dist::ProcessGroup> group, double eps = 1e-5,
                std::optional<double> momentum = 0.1, bool affine = true,
                bool track_running_stats = true);

  // Training mode with more than one rank: sync_batch_norm, installed as
  // BatchNorm2d's training-forward hook (the one mechanism convert_sync_batchnorm
  // uses too); otherwise exactly nn::BatchNorm2d::forward, whose shape check,
  // num_batches_tracked count and momentum (nullopt: cumulative average) apply.
  std::string extra_repr() const override;

  const std::shared_ptr<dist::ProcessGroup>& process_group() const { return group_; }

 private:
  std::shared_ptr<dist::ProcessGroup> group_;
};

// Makes every nn::BatchNorm2d in `module`'s tree (the module itself
// included) synchronise its training statistics over `group`, keeping its
// parameters and buffers (the same tensors, so optimizers and DDP that
// already hold them are unaffected). Layers that are already SyncBatchNorm
// are left as they are. Returns how many layers it converted. Call it on
// every rank, before wrapping the model in DistributedDataParallel.
// See Note [Converting BatchNorm2d in place] in sync_batch_norm.cpp.
int64_t convert_sync_batchnorm(nn::Module& module, std::shared_ptr<dist::ProcessGroup> group);

}  // namespace ddp::parallel
