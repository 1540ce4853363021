// The DDP engine's bucket plan as checkpoint state (Note [Bucket plans in
// checkpoints] in distributed.h).

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/parallel/bucket_tuner.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/reducer.h"

namespace ddp::parallel {

namespace {

constexpr const char* kWho = "DistributedDataParallel.load_bucket_plan_state";

const Tensor& entry(const TensorDict& state, const char* key) {
  const Tensor* t = state.find(key);
  DDP_CHECK_T(ValueError, t != nullptr && t->defined(), "{}: the state has no '{}'", kWho, key);
  return *t;
}

std::vector<int64_t> integers(const TensorDict& state, const char* key) {
  const Tensor t = entry(state, key).cpu().to(DType::i64).contiguous();
  DDP_CHECK_T(ValueError, t.dim() == 1, "{}: '{}' must be one-dimensional, got {}", kWho, key,
              t.describe());
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

double number(const TensorDict& state, const char* key) {
  const Tensor& t = entry(state, key);
  DDP_CHECK_T(ValueError, t.numel() == 1, "{}: '{}' must hold one number, got {}", kWho, key,
              t.describe());
  return t.cpu().to(DType::f64).item<double>();
}

}  // namespace

TensorDict DistributedDataParallelBase::bucket_plan_state() const {
  std::vector<int64_t> params, sizes;
  for (const std::vector<size_t>& bucket : reducer_->bucket_assignment()) {
    sizes.push_back(int64_t(bucket.size()));
    for (size_t i : bucket) params.push_back(int64_t(i));
  }
  TensorDict out;
  out.insert("buckets.params", Tensor::from_vector(params, {int64_t(params.size())}));
  out.insert("buckets.sizes", Tensor::from_vector(sizes, {int64_t(sizes.size())}));
  out.insert("buckets.rebuilt", Tensor::scalar(reducer_->buckets_rebuilt() ? 1.0 : 0.0, DType::f64));
  const bool tuned = tuner_ && tuner_->done();
  out.insert("buckets.tuned", Tensor::scalar(tuned ? 1.0 : 0.0, DType::f64));
  out.insert("tuner.alpha_s", Tensor::scalar(tuned ? tuner_->link().alpha_s : 0.0, DType::f64));
  out.insert("tuner.beta_s_per_byte",
             Tensor::scalar(tuned ? tuner_->link().beta_s_per_byte : 0.0, DType::f64));
  out.insert("tuner.predicted_exposed_s",
             Tensor::scalar(tuned ? tuner_->plan().predicted_exposed_s : 0.0, DType::f64));
  // Note [Overlapped step model]: the overlapped schedule the tuner chose.
  if (tuned && tuner_->overlap_schedule()) {
    const OverlapSchedule& s = *tuner_->overlap_schedule();
    out.insert("tuner.overlap.priority_buckets", Tensor::scalar(s.priority_buckets, DType::f64));
    out.insert("tuner.overlap.chunk_mb", Tensor::scalar(s.chunks.chunk_mb, DType::f64));
    out.insert("tuner.overlap.issue_ratio", Tensor::scalar(s.chunks.issue_ratio, DType::f64));
  }
  return out;
}

void DistributedDataParallelBase::load_bucket_plan_state(const TensorDict& state) {
  const std::vector<int64_t> params = integers(state, "buckets.params");
  const std::vector<int64_t> sizes = integers(state, "buckets.sizes");
  const bool rebuilt = number(state, "buckets.rebuilt") != 0;
  const bool tuned = number(state, "buckets.tuned") != 0;
  AlphaBeta link{number(state, "tuner.alpha_s"), number(state, "tuner.beta_s_per_byte")};
  const double predicted = number(state, "tuner.predicted_exposed_s");
  // The tuner's overlapped schedule (Note [Overlapped step model]), when the
  // saving job had one; older checkpoints have none.
  std::optional<OverlapSchedule> schedule;
  if (state.find("tuner.overlap.priority_buckets") != nullptr) {
    OverlapSchedule s;
    const double priority = number(state, "tuner.overlap.priority_buckets");
    DDP_CHECK_T(ValueError, priority >= 1 && priority <= 1e6 && priority == std::floor(priority),
                "{}: 'tuner.overlap.priority_buckets' must be a whole number >= 1, got {}", kWho,
                priority);
    s.priority_buckets = int(priority);
    s.chunks = {number(state, "tuner.overlap.chunk_mb"), number(state, "tuner.overlap.issue_ratio")};
    Reducer::check_overlap_chunks(s.chunks, kWho);
    schedule = s;
  }

  std::vector<std::vector<size_t>> plan;
  size_t at = 0;
  for (int64_t n : sizes) {
    DDP_CHECK_T(ValueError, n > 0 && size_t(n) <= params.size() - at,
                "{}: 'buckets.sizes' ({} buckets) does not split the {} entries of "
                "'buckets.params'",
                kWho, sizes.size(), params.size());
    std::vector<size_t> bucket;
    for (int64_t k = 0; k < n; ++k, ++at) {
      DDP_CHECK_T(ValueError, params[at] >= 0, "{}: parameter index {} is negative", kWho,
                  params[at]);
      bucket.push_back(size_t(params[at]));
    }
    plan.push_back(std::move(bucket));
  }
  DDP_CHECK_T(ValueError, at == params.size(),
              "{}: 'buckets.sizes' covers {} of the {} entries of 'buckets.params'", kWho, at,
              params.size());

  // An equal plan is installed only to mark a due rebuild as done; a fixed
  // one (which ZeRO-1's shard views rely on) keeps its buffers.
  const bool fixed = !options_.rebuild_buckets && !tuner_;
  const bool same = plan == reducer_->bucket_assignment();
  if (!same || (!fixed && rebuilt && !reducer_->buckets_rebuilt())) {
    DDP_CHECK_T(ValueError, !fixed,
                "{}: the checkpoint's {} buckets differ from this DDP's {}, which never changes its "
                "buckets (rebuild_buckets off, no auto_bucket_size); build it with the options of "
                "the saving job (the same bucket_cap_mb)",
                kWho, plan.size(), reducer_->num_buckets());
    reducer_->rebuild_buckets(plan);  // checks every index first; ValueError, nothing changed
  }
  if (tuner_ && tuned) tuner_->restore(BucketPlan{plan, predicted}, link);
  if (tuner_ && tuned && schedule) {  // installed as the tuner installed it
    tuner_->restore_overlap_schedule(schedule);
    if (overlap_) reducer_->set_overlap(reducer_->overlap(), schedule->priority_buckets,
                                        schedule->chunks);
  }
}

}  // namespace ddp::parallel
