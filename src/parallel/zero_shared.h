#pragma once
// The state that ZeroRedundancyOptimizer shares with the hooks it registers
// on DDP (they may outlive it). Internal to src/parallel; see Note [ZeRO-1
// shards] in ddp/parallel/zero.h.

#include <vector>

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
  // Before the next forward: wait, copy into the parameters, clear .grad.
  void finish_all_gather();

  DistributedDataParallelBase* ddp;  // outlives the training loop
  dist::ProcessGroup* group = nullptr;  // the DDP's group when the shards were cut
  int rank = 0;
  int world = 1;
  Tensors params;  // the DDP's trainable parameters, in the Reducer's numbering
  std::vector<BucketShard> buckets;
  std::vector<ZeroSegment> segments;  // this rank's, bucket by bucket
  Tensors segment_params;             // flat leaf views of the parameters, by segment
  bool gather_pending = false;
  bool clear_grads_due = false;
};

}  // namespace ddp::parallel
