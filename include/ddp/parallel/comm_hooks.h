#pragma once
// Communication hooks: how the DDP engine turns one bucket of local
// gradients into the average over all ranks (torch's register_comm_hook).
//
// The engine calls the hook once per bucket, on the training thread, as soon
// as every gradient of that bucket is ready (while backward goes on). The
// hook starts the communication and returns at once with a BucketWork; at
// the end of backward the engine waits on each work in launch order and then
// runs its `finish` step. When that step returns, bucket.buffer must hold the
// average of the buffers of all ranks: the parameters' .grad are views into
// it.
//
// A user hook is any callable with the CommHook signature; capture its state
// in the lambda. Every rank must register the same hook, and a hook must
// issue the same collectives in the same order on every rank.
//
//   ddp_model.register_comm_hook(parallel::bf16_compress_hook);
//   ddp_model.register_comm_hook([](dist::ProcessGroup& g, parallel::GradBucket& b) {
//     return parallel::allreduce_hook(g, b);  // log, quantise, ... around it
//   });

#include <functional>

#include "ddp/dist/process_group.h"
#include "ddp/dist/work.h"
#include "ddp/tensor/tensor.h"

namespace ddp::parallel {

// One bucket, as a hook sees it.
struct GradBucket {
  int index = 0;       // launch position: 0 is the first bucket of backward
  bool is_last = false;  // the last bucket of this backward pass
  Tensor buffer;       // flat and contiguous: this rank's gradients, one dtype
                       // and device; the average over ranks goes back here
  Tensors parameters;  // the parameters whose gradients the buffer holds
  Tensors gradients;   // views into buffer, shaped like the parameters
};

// A bucket's communication in flight.
struct BucketWork {
  dist::WorkPtr work;             // waited on at the end of backward
  std::function<void()> finish;   // then run on the training thread (may be empty)
};

using CommHook = std::function<BucketWork(dist::ProcessGroup& group, GradBucket& bucket)>;

// The default: allreduce with ReduceOp::avg, in place on the buffer.
BucketWork allreduce_hook(dist::ProcessGroup& group, GradBucket& bucket);

// Gradient compression: the buffer is divided by the world size and cast to
// f16 (or bf16), the low-precision copy is summed across ranks, and the
// result is cast back into the buffer. Halves the bytes NCCL moves. The host
// backends (mpi, gloo) send half types as f32 (See Note [Half precision on
// the wire]), so there the hooks cost two casts and save nothing.
BucketWork fp16_compress_hook(dist::ProcessGroup& group, GradBucket& bucket);
BucketWork bf16_compress_hook(dist::ProcessGroup& group, GradBucket& bucket);

}  // namespace ddp::parallel
