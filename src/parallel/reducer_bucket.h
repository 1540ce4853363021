#pragma once
// The Reducer's bucket (Note [Gradient buckets]), for the files that make
// up the Reducer: reducer.cpp, reducer_rebuild.cpp, reducer_join.cpp.

#include <vector>

#include "ddp/parallel/comm_hooks.h"
#include "ddp/parallel/reducer.h"

namespace ddp::parallel {

struct Reducer::Bucket {
  Tensor buffer;                // flat: the gradients of `params`, back to back
  std::vector<size_t> params;   // parameter indices, in bucket order
  Tensors views;                // by slot: the .grad of params[slot]
  size_t pending = 0;           // gradients not yet ready in this pass
  bool launched = false;
  BucketWork work;
  BucketTiming timing;
};

}  // namespace ddp::parallel
