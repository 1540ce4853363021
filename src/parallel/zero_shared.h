#pragma once
// The state that ZeroRedundancyOptimizer shares with the hooks it registers
// on DDP (they may outlive it). Internal to src/parallel; see Note [ZeRO-1
// shards] in ddp/parallel/zero.h.

#include <vector>

#include "ddp/optim/optimizer.h"

#include "ddp/dist/process_group.h"
#include "ddp/parallel/zero.h"

namespace ddp::parallel {

struct ZeroShared {
  // One gradient bucket of the Reducer, and this rank's chunk of it.
  struct BucketShard {
    std::vector<size_t> params;    // the parameters, in buffer order
    std::vector<int64_t> offsets;  // each one's first element in the buffer
    int64_t numel = 0;             // the buffer's elements
    int64_t chunk = 0;             // ceil(numel / world)
    Tensor buffer;      // the Reducer's buffer (the model's .grad), once seen
    Tensor scratch;     // chunk * world elements, when world does not divide numel
    Tensor grad_chunk;  // the averaged gradient of this rank's chunk (at one
                        // rank: the buffer itself)
    dist::WorkPtr gather;
    bool gather_pending = false;  // gather issued, not yet waited for
    bool zero_due = false;        // buffer to be zeroed before the next accumulation
    // Where the parameters are all-gathered (Note [ZeRO-1 copies]).
    const Tensor& gather_target() const { return scratch.defined() ? scratch : buffer; }
  };

  ZeroShared(DistributedDataParallelBase& ddp, Tensors model_params);
  // Cuts the shards for the DDP's current group and buckets (again after
  // reset_group: Note [ZeRO-1 in an elastic job]); drops any gather in flight.
  void lay_out();

  BucketWork reduce_scatter_hook(dist::ProcessGroup& g, GradBucket& bucket);
  // After the shard's step: pack it and start one all-gather per bucket.
  void launch_all_gather();
  // Note [ZeRO-1 overlapped with the forward]: steps the shard bucket by
  // bucket, last bucket first, issuing each bucket's all-gather after its step.
  void step_and_launch(optim::Optimizer& local);
  // Before the next forward: wait, copy into the parameters, clear .grad.
  void finish_all_gather();
  // The same for bucket b only (a layer's pre-hook).
  void finish_bucket(size_t b);
  bool any_gather_pending() const;
  void launch_gather(size_t b);    // packs this rank's segments of b, issues its all-gather
  void complete_gather(size_t b);  // waits for b's all-gather, copies the other ranks' pieces

  bool overlap = false;  // ZeroOptions::overlap_with_forward

  DistributedDataParallelBase* ddp;  // outlives the training loop
  dist::ProcessGroup* group = nullptr;  // the DDP's group when the shards were cut
  int rank = 0;
  int world = 1;
  Tensors params;  // the DDP's trainable parameters, in the Reducer's numbering
  std::vector<BucketShard> buckets;
  std::vector<ZeroSegment> segments;  // this rank's, bucket by bucket
  Tensors segment_params;             // flat leaf views of the parameters, by segment
  std::vector<size_t> bucket_of;      // by parameter: the bucket it lies in
  std::vector<size_t> gather_order;   // the buckets, as the last step issued their gathers
};

}  // namespace ddp::parallel
