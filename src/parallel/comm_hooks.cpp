// The built-in communication hooks. See comm_hooks.h for the contract.

#include "ddp/parallel/comm_hooks.h"

namespace ddp::parallel {

BucketWork allreduce_hook(dist::ProcessGroup& group, GradBucket& bucket) {
  return BucketWork{group.allreduce({bucket.buffer}, dist::ReduceOp::avg), {}};
}

namespace {

// Divide before the cast: a sum of world-size many f16 gradients overflows
// where their average does not.
BucketWork compress_hook(dist::ProcessGroup& group, GradBucket& bucket, DType wire) {
  Tensor low = bucket.buffer.to(wire);
  if (low.is_same(bucket.buffer)) low = bucket.buffer.clone();  // already that dtype
  low.mul_(1.0 / group.size());
  dist::WorkPtr work = group.allreduce({low}, dist::ReduceOp::sum);
  Tensor buffer = bucket.buffer;
  return BucketWork{std::move(work), [buffer, low]() mutable { buffer.copy_(low); }};
}

}  // namespace

BucketWork fp16_compress_hook(dist::ProcessGroup& group, GradBucket& bucket) {
  return compress_hook(group, bucket, DType::f16);
}

BucketWork bf16_compress_hook(dist::ProcessGroup& group, GradBucket& bucket) {
  return compress_hook(group, bucket, DType::bf16);
}

}  // namespace ddp::parallel
