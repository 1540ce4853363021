// The Reducer's bucket rebuilds: from rank 0's gradient order (Note
// [Rebuilding buckets]) and from an assignment the caller chooses.

#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/error.h"
#include "ddp/parallel/reducer.h"
#include "ddp/tensor/ops.h"
#include "parallel/reducer_bucket.h"

namespace ddp::parallel {

void Reducer::rebuild_buckets(const std::vector<std::vector<size_t>>& assignment) {
  DDP_CHECK_T(ValueError, !armed_,
              "Reducer::rebuild_buckets: called while a synchronised backward is pending; call it "
              "between iterations");
  std::vector<char> seen(params_.size(), 0);
  size_t listed = 0;
  for (size_t k = 0; k < assignment.size(); ++k) {
    const auto& members = assignment[k];
    DDP_CHECK_T(ValueError, !members.empty(), "Reducer::rebuild_buckets: bucket {} is empty", k);
    const Tensor& first = params_.at(std::min(members.front(), params_.size() - 1));
    for (size_t i : members) {
      DDP_CHECK_T(ValueError, i < params_.size(),
                  "Reducer::rebuild_buckets: bucket {} names parameter {} of {}", k, i,
                  params_.size());
      DDP_CHECK_T(ValueError, !seen[i], "Reducer::rebuild_buckets: parameter '{}' is listed twice",
                  names_[i]);
      DDP_CHECK_T(ValueError,
                  params_[i].device() == first.device() && params_[i].dtype() == first.dtype(),
                  "Reducer::rebuild_buckets: bucket {} mixes devices or dtypes ('{}' and '{}')", k,
                  names_[members.front()], names_[i]);
      seen[i] = 1;
      ++listed;
    }
  }
  DDP_CHECK_T(ValueError, listed == params_.size(),
              "Reducer::rebuild_buckets: the assignment lists {} of {} parameters", listed,
              params_.size());
  finish_all();  // Note [Overlapped step]
  wait_launched_or_detach();
  install_buckets(assignment);
  rebuilt_ = true;
  rebuild_due_ = false;
  ready_order_.clear();
}

std::vector<std::vector<size_t>> Reducer::bucket_assignment() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : buckets_) out.push_back(b->params);
  return out;
}

void Reducer::register_comm_hook(CommHook hook) {
  DDP_CHECK_T(ValueError, hook != nullptr, "register_comm_hook: empty hook");
  DDP_CHECK_T(ValueError, hook_ == nullptr,
              "register_comm_hook: a communication hook is registered already (one per model)");
  hook_ = std::move(hook);
}

// Note [Rebuilding buckets]
void Reducer::rebuild_from_rank0_order() {
  finish_all();  // Note [Overlapped step]
  rebuild_due_ = false;
  std::vector<int64_t> order;
  std::vector<char> listed(params_.size(), 0);
  for (size_t i : ready_order_) {
    order.push_back(int64_t(i));
    listed[i] = 1;
  }
  for (size_t i = params_.size(); i-- > 0;)  // never ready: reverse registration order
    if (!listed[i]) order.push_back(int64_t(i));
  Tensor t = control_tensor(Tensor::from_vector(order, {int64_t(order.size())}));
  group_->broadcast({t}, 0)->wait(group_->timeout());
  std::vector<int64_t> rank0 = t.cpu().to_vector<int64_t>();
  std::vector<size_t> new_order;
  std::vector<char> seen(params_.size(), 0);
  for (int64_t v : rank0) {
    DDP_CHECK(v >= 0 && size_t(v) < params_.size() && !seen[size_t(v)],
              "DistributedDataParallel: rank 0's gradient order is not a permutation of {} "
              "parameters (do all ranks wrap the same model?)",
              params_.size());
    seen[size_t(v)] = 1;
    new_order.push_back(size_t(v));
  }
  build_buckets(new_order);
  rebuilt_ = true;
  ready_order_.clear();
}

}  // namespace ddp::parallel
