// StragglerDetector: see Note [Straggler score] in straggler.h.

#include "ddp/parallel/straggler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/tensor/tensor.h"

namespace ddp::parallel {

void check_straggler_options(const StragglerOptions& o) {
  DDP_CHECK(o.interval >= 1,
            "StragglerOptions: interval must be >= 1 (steps between exchanges), got {}",
            o.interval);
  DDP_CHECK(o.window >= 1, "StragglerOptions: window must be >= 1 (steps a score covers), got {}",
            o.window);
  DDP_CHECK(o.threshold > 0 && o.threshold <= 1,
            "StragglerOptions: threshold must be in (0, 1] (a share of the window), got {}",
            o.threshold);
  DDP_CHECK(std::isfinite(o.min_delay_ms) && o.min_delay_ms >= 0,
            "StragglerOptions: min_delay_ms must be finite and >= 0, got {}", o.min_delay_ms);
  DDP_CHECK(o.relative_margin >= 0 && o.relative_margin < 1,
            "StragglerOptions: relative_margin must be in [0, 1), got {}", o.relative_margin);
}

std::optional<double> tail_wait_seconds(const std::vector<BucketTiming>& timeline) {
  if (timeline.empty()) return std::nullopt;
  auto last_ready = BucketTiming::Clock::time_point::min();
  auto last_done = BucketTiming::Clock::time_point::min();
  for (const auto& b : timeline) {
    last_ready = std::max(last_ready, b.ready);
    last_done = std::max(last_done, b.done);
  }
  return std::max(0.0, std::chrono::duration<double>(last_done - last_ready).count());
}

int late_rank(const std::vector<double>& waits_s, const StragglerOptions& o) {
  if (waits_s.size() < 2) return -1;
  // The smallest and the next smallest wait; a step with any rank not
  // measured names nobody (its waits are not comparable).
  int first = -1;
  double w1 = std::numeric_limits<double>::infinity(), w2 = w1;
  for (size_t r = 0; r < waits_s.size(); ++r) {
    const double w = waits_s[r];
    if (!std::isfinite(w)) return -1;
    if (w < w1) {
      w2 = w1;
      w1 = w;
      first = int(r);
    } else if (w < w2) {
      w2 = w;
    }
  }
  const double gap = w2 - w1;
  // gap > 0 as well: with both margins at 0 a tie must not name the lower rank.
  return gap > 0 && gap >= std::max(o.min_delay_ms * 1e-3, o.relative_margin * w2) ? first : -1;
}

StragglerDetector::StragglerDetector(std::shared_ptr<dist::ProcessGroup> group,
                                     StragglerOptions options, Device device)
    : group_(std::move(group)), options_(options), device_(device) {
  DDP_CHECK(group_ != nullptr, "StragglerDetector: the process group is null");
  check_straggler_options(options_);
  const size_t n = size_t(group_->size());
  scores_.assign(n, 0.0);
  delays_ms_.assign(n, 0.0);
  named_.assign(n, 0);
  pending_.reserve(size_t(options_.interval));
}

bool StragglerDetector::observe(const Reducer& reducer) {
  // A step without a new synchronised backward (every micro-batch under
  // no_sync, a forward-only step) would repeat the previous timeline.
  const uint64_t n = reducer.synchronised_backwards();
  const bool fresh = !seen_reducer_ || n != last_backwards_;
  seen_reducer_ = true;
  last_backwards_ = n;
  if (!fresh) return observe_wait(std::numeric_limits<double>::quiet_NaN());
  return observe(reducer.last_timeline());
}

bool StragglerDetector::observe(const std::vector<BucketTiming>& timeline) {
  return observe_wait(
      tail_wait_seconds(timeline).value_or(std::numeric_limits<double>::quiet_NaN()));
}

bool StragglerDetector::observe_wait(double wait_s) {
  pending_.push_back(wait_s);
  if (int64_t(pending_.size()) < options_.interval) return false;
  exchange();
  return true;
}

void StragglerDetector::exchange() {
  const int n = group_->size();
  const size_t k = pending_.size();
  std::vector<std::vector<double>> all(static_cast<size_t>(n));
  if (n == 1) {
    all[0] = pending_;
  } else {
    // One allgather of `interval` doubles per rank (Note [Straggler score]).
    Tensor mine = Tensor::from_vector<double>(pending_, {int64_t(k)}).to(device_);
    Tensors outs;
    for (int r = 0; r < n; ++r)
      outs.push_back(Tensor::zeros({int64_t(k)}, TensorOptions(kFloat64).device(device_)));
    group_->allgather(outs, mine)->wait(group_->timeout());
    for (int r = 0; r < n; ++r)
      all[size_t(r)] = outs[size_t(r)].to(Device::cpu()).to_vector<double>();
  }
  pending_.clear();
  std::vector<double> waits(static_cast<size_t>(n));
  for (size_t s = 0; s < k; ++s) {
    for (int r = 0; r < n; ++r) waits[size_t(r)] = all[size_t(r)][s];
    push_step(waits);
  }
  rescore();
}

void StragglerDetector::add_step(const std::vector<double>& waits_s) {
  DDP_CHECK(int(waits_s.size()) == world_size(),
            "StragglerDetector::add_step: {} waits for a world of {}", waits_s.size(),
            world_size());
  push_step(waits_s);
  rescore();
}

void StragglerDetector::push_step(const std::vector<double>& waits_s) {
  // A step some rank did not measure is left out of the window entirely,
  // so the score is a share of the steps that could name someone.
  for (double w : waits_s)
    if (!std::isfinite(w)) return;
  const int late = late_rank(waits_s, options_);
  double delay = 0;
  if (late >= 0) {
    delay = std::numeric_limits<double>::infinity();
    for (size_t r = 0; r < waits_s.size(); ++r)
      if (int(r) != late) delay = std::min(delay, waits_s[r] - waits_s[size_t(late)]);
  }
  late_.push_back(late);
  delay_s_.push_back(delay);
  while (int64_t(late_.size()) > options_.window) {
    late_.pop_front();
    delay_s_.pop_front();
  }
}

void StragglerDetector::rescore() {
  const size_t n = scores_.size();
  std::vector<int64_t> count(n, 0);
  std::vector<double> delay_sum(n, 0.0);
  for (size_t i = 0; i < late_.size(); ++i) {
    if (late_[i] < 0) continue;
    ++count[size_t(late_[i])];
    delay_sum[size_t(late_[i])] += delay_s_[i];
  }
  // Out of the whole window even before it has filled: a rank is named only
  // after threshold * window late steps, so the noisy first steps (warm-up,
  // the bucket rebuild) cannot name anyone on their own.
  const double window = double(options_.window);
  for (size_t r = 0; r < n; ++r) {
    scores_[r] = double(count[r]) / window;
    delays_ms_[r] = count[r] > 0 ? 1e3 * delay_sum[r] / double(count[r]) : 0.0;
    const bool named = scores_[r] >= options_.threshold;
    if (named == bool(named_[r])) continue;
    named_[r] = named;
    // Every rank has the same scores; one log line per change is enough.
    if (!options_.log || group_->rank() != 0) continue;
    if (named)
      DDP_LOG_WARNING(
          "DistributedDataParallel: rank {} is a straggler: the other ranks waited for it in {} of "
          "the last {} measured steps (score {:.2f} >= threshold {:.2f}), {:.1f} ms per step on "
          "average",
          r, count[r], late_.size(), scores_[r], options_.threshold, delays_ms_[r]);
    else
      DDP_LOG_INFO(
          "DistributedDataParallel: rank {} is no longer a straggler (score {:.2f} < threshold "
          "{:.2f})",
          r, scores_[r], options_.threshold);
  }
}

double StragglerDetector::score(int rank) const {
  DDP_CHECK(rank >= 0 && rank < world_size(), "StragglerDetector: rank {} is not in a world of {}",
            rank, world_size());
  return scores_[size_t(rank)];
}

double StragglerDetector::typical_delay_ms(int rank) const {
  DDP_CHECK(rank >= 0 && rank < world_size(), "StragglerDetector: rank {} is not in a world of {}",
            rank, world_size());
  return delays_ms_[size_t(rank)];
}

std::vector<int> StragglerDetector::stragglers() const {
  std::vector<int> out;
  for (int r = 0; r < world_size(); ++r)
    if (scores_[size_t(r)] >= options_.threshold) out.push_back(r);
  return out;
}

}  // namespace ddp::parallel
