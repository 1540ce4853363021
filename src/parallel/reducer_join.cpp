// The Reducer's part of a join (Note [Join] in join.h): a rank that ran out
// of inputs shadows the others' gradient collectives.

#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/error.h"
#include "ddp/parallel/reducer.h"
#include "ddp/tensor/ops.h"
#include "parallel/reducer_bucket.h"

namespace ddp::parallel {

// ---- Note [Join] --------------------------------------------------------------

void Reducer::shadow_rebuild() { rebuild_from_rank0_order(); }

bool Reducer::syncs_used_flags() const {
  return options_.find_unused_parameters ||
         (options_.static_graph && static_global_used_.empty());
}

void Reducer::shadow_backward() {
  DDP_CHECK(!armed_,
            "DistributedDataParallel: a rank that joined ran a forward that was not followed by "
            "its backward");
  NoGradGuard no_grad;
  // Zeros on staging buffers: the same sizes, dtypes and hooks as the
  // others' buckets, and this rank's .grad is never written.
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const Bucket& b = *buckets_[k];
    GradBucket view;
    view.index = int(k);
    view.is_last = k + 1 == buckets_.size();
    view.buffer = zeros_like(b.buffer);
    int64_t offset = 0;
    for (size_t i : b.params) {
      view.parameters.push_back(params_[i]);
      view.gradients.push_back(bucket_view(view.buffer, offset, params_[i]));
      offset += params_[i].numel();
    }
    BucketWork work = hook_ ? hook_(*group_, view) : allreduce_hook(*group_, view);
    DDP_CHECK(work.work != nullptr,
              "DistributedDataParallel: the communication hook returned no work for bucket {}", k);
    work.work->wait(group_->timeout());
    if (auto e = work.work->exception()) std::rethrow_exception(e);
    if (work.finish) work.finish();
  }
  if (syncs_used_flags()) {
    Tensor t = control_tensor(Tensor::zeros({int64_t(params_.size())}));
    group_->allreduce({t}, dist::ReduceOp::sum)->wait(group_->timeout());
    if (options_.static_graph && static_global_used_.empty()) {
      std::vector<float> global = t.cpu().to_vector<float>();
      static_global_used_.assign(params_.size(), 0);
      for (size_t i = 0; i < params_.size(); ++i) static_global_used_[i] = global[i] != 0;
    }
  }
}

}  // namespace ddp::parallel
