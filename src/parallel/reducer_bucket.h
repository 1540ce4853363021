#pragma once
// The Reducer's bucket (Note [Gradient buckets]), for the files that make
// up the Reducer: reducer.cpp, reducer_rebuild.cpp, reducer_join.cpp.

#include <vector>

#include "ddp/parallel/comm_hooks.h"
#include "ddp/parallel/reducer.h"

namespace ddp::parallel {

// param's gradient as it lies in a bucket: numel elements of `buffer` from
// `offset`, in param's own dense layout (a channels-last weight gets a
// channels-last view), so autograd accumulates into it and the optimizer
// reads it with no layout change (Note [Gradient buckets]).
Tensor bucket_view(const Tensor& buffer, int64_t offset, const Tensor& param);

struct Reducer::Bucket {
  Tensor buffer;                // flat: the gradients of `params`, back to back
  std::vector<size_t> params;   // parameter indices, in bucket order
  Tensors views;                // by slot: the .grad of params[slot]
  size_t pending = 0;           // gradients not yet ready in this pass
  bool launched = false;
  bool finished = true;         // Note [Overlapped step]: false while in flight after backward
  BucketWork work;
  // Note [Overlap chunks]: in a chunked backward, the slices of `buffer`
  // and their allreduces; chunks_issued of them went out (a prefix).
  struct Chunk {
    int64_t offset = 0, numel = 0;
    dist::WorkPtr work;
  };
  std::vector<Chunk> chunks;
  size_t chunks_issued = 0;
  BucketTiming timing;
};

}  // namespace ddp::parallel
