// Automatic bucket sizes: the alpha-beta fit, the exposed-time simulator,
// the planner and the tuner DistributedDataParallel runs. See the Notes in
// bucket_tuner.h.

#include "ddp/parallel/bucket_tuner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/parallel/reducer.h"

namespace ddp::parallel {

namespace {

using Clock = std::chrono::steady_clock;

bool finite_non_negative(double v) { return std::isfinite(v) && v >= 0; }

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Parameter indices by ready time; ties: the later-registered first (the
// order backward usually produces them).
std::vector<size_t> ready_order(const std::vector<GradInfo>& grads) {
  std::vector<size_t> order(grads.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (grads[a].ready_s != grads[b].ready_s) return grads[a].ready_s < grads[b].ready_s;
    return a > b;
  });
  return order;
}

void check_grads(const char* who, const std::vector<GradInfo>& grads) {
  DDP_CHECK_T(ValueError, !grads.empty(), "{}: no parameters", who);
  for (size_t i = 0; i < grads.size(); ++i)
    DDP_CHECK_T(ValueError, finite_non_negative(grads[i].ready_s),
                "{}: parameter {} has ready time {} (must be finite and >= 0)", who, i,
                grads[i].ready_s);
}

void check_link(const char* who, const AlphaBeta& link) {
  DDP_CHECK_T(ValueError,
              finite_non_negative(link.alpha_s) && finite_non_negative(link.beta_s_per_byte),
              "{}: alpha {} s and beta {} s/byte must be finite and >= 0", who, link.alpha_s,
              link.beta_s_per_byte);
}

std::string mib_list(const std::vector<std::vector<size_t>>& buckets,
                     const std::vector<GradInfo>& grads) {
  std::string out;
  for (size_t k = 0; k < buckets.size(); ++k) {
    size_t bytes = 0;
    for (size_t i : buckets[k]) bytes += grads[i].bytes;
    out += fmt::format("{}{:.2f}", k ? ", " : "", double(bytes) / (1 << 20));
  }
  return out;
}

}  // namespace

AlphaBeta fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  DDP_CHECK_T(ValueError, bytes.size() == seconds.size(),
              "fit_alpha_beta: {} sizes but {} times", bytes.size(), seconds.size());
  for (size_t k = 0; k < bytes.size(); ++k)
    DDP_CHECK_T(ValueError, finite_non_negative(bytes[k]) && finite_non_negative(seconds[k]),
                "fit_alpha_beta: sample {} ({} bytes, {} s) must be finite and >= 0", k, bytes[k],
                seconds[k]);
  // Note [Alpha-beta fit]: weighted by 1 / time^2, i.e. relative errors, so
  // the small collectives fix alpha and the large ones beta; plain least
  // squares lets a few milliseconds of noise on a large collective swamp an
  // alpha of a few hundred microseconds.
  double sw = 0, mx = 0, my = 0;
  std::vector<double> w(bytes.size());
  for (size_t k = 0; k < bytes.size(); ++k) {
    w[k] = 1.0 / std::max(seconds[k] * seconds[k], 1e-18);
    sw += w[k];
    mx += w[k] * bytes[k];
    my += w[k] * seconds[k];
  }
  mx /= sw;
  my /= sw;
  double sxx = 0, sxy = 0;
  for (size_t k = 0; k < bytes.size(); ++k) {
    sxx += w[k] * (bytes[k] - mx) * (bytes[k] - mx);
    sxy += w[k] * (bytes[k] - mx) * (seconds[k] - my);
  }
  DDP_CHECK_T(ValueError, bytes.size() >= 2 && sxx > 0,
              "fit_alpha_beta: needs samples of at least two different sizes, got {}",
              bytes.size());
  AlphaBeta ab;
  ab.beta_s_per_byte = std::max(0.0, sxy / sxx);
  ab.alpha_s = std::max(0.0, my - ab.beta_s_per_byte * mx);
  return ab;
}

AlphaBeta measure_alpha_beta(dist::ProcessGroup& group, const Device& device, DType dtype,
                             const std::vector<size_t>& sizes, int repeats) {
  DDP_CHECK_T(ValueError, repeats >= 1, "measure_alpha_beta: repeats must be >= 1, got {}",
              repeats);
  const size_t elem = element_size(dtype);
  std::vector<double> xs, ys;
  for (size_t bytes : sizes) {
    const int64_t n = std::max<int64_t>(1, int64_t(bytes / elem));
    Tensor t = Tensor::zeros({n}, TensorOptions(dtype).device(device));
    Tensors ts{t};
    group.allreduce(ts, dist::ReduceOp::sum)->wait(group.timeout());  // connections, caches
    std::vector<double> runs;
    for (int r = 0; r < repeats; ++r) {
      const auto start = Clock::now();
      group.allreduce(ts, dist::ReduceOp::sum)->wait(group.timeout());
      runs.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    xs.push_back(double(n) * double(elem));
    ys.push_back(median_of(runs));
  }
  return fit_alpha_beta(xs, ys);
}

namespace {

// Each bucket's ready time (its last gradient's) and bytes, after checking
// that `buckets` partition the parameters.
struct BucketStat {
  double ready_s = 0;
  double bytes = 0;
};
std::vector<BucketStat> bucket_stats(const char* who, const std::vector<GradInfo>& grads,
                                     const std::vector<std::vector<size_t>>& buckets) {
  std::vector<char> seen(grads.size(), 0);
  size_t count = 0;
  std::vector<BucketStat> stats;
  for (size_t k = 0; k < buckets.size(); ++k) {
    DDP_CHECK_T(ValueError, !buckets[k].empty(), "{}: bucket {} is empty", who, k);
    BucketStat st;
    for (size_t i : buckets[k]) {
      DDP_CHECK_T(ValueError, i < grads.size() && !seen[i],
                  "{}: parameter {} is out of range or in two buckets", who, i);
      seen[i] = 1;
      ++count;
      st.ready_s = std::max(st.ready_s, grads[i].ready_s);
      st.bytes += double(grads[i].bytes);
    }
    stats.push_back(st);
  }
  DDP_CHECK_T(ValueError, count == grads.size(), "{}: the buckets hold {} of {} parameters", who,
              count, grads.size());
  return stats;
}

}  // namespace

double simulate_exposed_s(const std::vector<GradInfo>& grads,
                          const std::vector<std::vector<size_t>>& buckets, const AlphaBeta& link) {
  check_grads("simulate_exposed_s", grads);
  check_link("simulate_exposed_s", link);
  double end = -std::numeric_limits<double>::infinity(), last_ready = 0;
  for (const BucketStat& b : bucket_stats("simulate_exposed_s", grads, buckets)) {
    end = std::max(end, b.ready_s) + link.time_s(b.bytes);
    last_ready = std::max(last_ready, b.ready_s);
  }
  return std::max(0.0, end - last_ready);
}

std::vector<std::vector<size_t>> buckets_by_cap(const std::vector<GradInfo>& grads,
                                                size_t cap_bytes) {
  check_grads("buckets_by_cap", grads);
  DDP_CHECK_T(ValueError, cap_bytes > 0, "buckets_by_cap: the cap must be > 0 bytes");
  std::vector<std::vector<size_t>> buckets;
  size_t bytes = 0;
  for (size_t i : ready_order(grads)) {
    if (buckets.empty() || (bytes + grads[i].bytes > cap_bytes && !buckets.back().empty())) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(i);
    bytes += grads[i].bytes;
  }
  return buckets;
}

// Note [Overlapped step model]: the reducer's release-and-issue rule
// (Note [Overlap chunks]) replayed on the alpha-beta link.
double simulate_overlap_exposed_s(const std::vector<GradInfo>& grads,
                                  const std::vector<std::vector<size_t>>& buckets,
                                  const AlphaBeta& link, const OverlapSchedule& schedule) {
  const char* who = "simulate_overlap_exposed_s";
  check_grads(who, grads);
  check_link(who, link);
  DDP_CHECK_T(ValueError, schedule.priority_buckets >= 1,
              "{}: priority_buckets must be >= 1, got {}", who, schedule.priority_buckets);
  DDP_CHECK_T(ValueError, finite_non_negative(schedule.forward_ratio),
              "{}: forward_ratio must be finite and >= 0, got {}", who, schedule.forward_ratio);
  Reducer::check_overlap_chunks(schedule.chunks, who);
  const std::vector<BucketStat> stats = bucket_stats(who, grads, buckets);
  const size_t n = stats.size();
  const size_t held = std::min(n, size_t(schedule.priority_buckets));
  double end_of_backward = 0;
  for (const BucketStat& b : stats) end_of_backward = std::max(end_of_backward, b.ready_s);

  // Each bucket's chunks, in bytes (whole buckets: one chunk each).
  const double chunk_bytes = schedule.chunks.chunk_mb * 1024.0 * 1024.0;
  std::vector<std::vector<double>> chunks(n);
  for (size_t k = 0; k < n; ++k) {
    double left = stats[k].bytes;
    if (chunk_bytes <= 0 || chunk_bytes >= left) {
      chunks[k] = {left};
      continue;
    }
    for (; left > 0; left -= chunk_bytes) chunks[k].push_back(std::min(chunk_bytes, left));
  }
  // The link, one collective at a time in issue order.
  double link_free = -std::numeric_limits<double>::infinity();
  std::vector<double> finished(n, -std::numeric_limits<double>::infinity());
  std::vector<size_t> issued(n, 0);
  auto issue = [&](size_t k, double at) {
    link_free = std::max(link_free, at) + link.time_s(chunks[k][issued[k]]);
    finished[k] = link_free;
    ++issued[k];
  };
  // During backward: releases in bucket order, each followed by the budget.
  double released = 0, issued_bytes = 0, release_time = 0;
  size_t head = 0;
  for (size_t k = 0; k + held < n; ++k) {
    release_time = std::max(release_time, stats[k].ready_s);
    released += stats[k].bytes;
    for (; head <= k; ++head) {
      while (issued[head] < chunks[head].size() &&
             issued_bytes + chunks[head][issued[head]] <= schedule.chunks.issue_ratio * released) {
        issued_bytes += chunks[head][issued[head]];
        issue(head, release_time);
      }
      if (issued[head] < chunks[head].size()) break;
    }
  }
  // The end of backward: every chunk left, the last bucket first.
  for (size_t k = n; k-- > 0;)
    while (issued[k] < chunks[k].size()) issue(k, end_of_backward);
  // The next forward: buckets in the order it needs them, each wait
  // delaying the rest.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return stats[a].ready_s > stats[b].ready_s || (stats[a].ready_s == stats[b].ready_s && a > b);
  });
  double waited = 0;
  for (size_t k : order) {
    const double needed =
        end_of_backward + schedule.forward_ratio * (end_of_backward - stats[k].ready_s) + waited;
    waited += std::max(0.0, finished[k] - needed);
  }
  return waited;
}

OverlapPlan plan_overlap(const std::vector<GradInfo>& grads, const AlphaBeta& link,
                         double forward_ratio) {
  check_grads("plan_overlap", grads);
  check_link("plan_overlap", link);
  DDP_CHECK_T(ValueError, finite_non_negative(forward_ratio),
              "plan_overlap: forward_ratio must be finite and >= 0, got {}", forward_ratio);
  constexpr double kMiB = 1024.0 * 1024.0;
  OverlapPlan best;
  bool have = false;
  std::vector<std::vector<size_t>> previous;
  for (double cap_mb : {1.0, 2.0, 5.0, 10.0, 25.0}) {
    std::vector<std::vector<size_t>> buckets = buckets_by_cap(grads, size_t(cap_mb * kMiB));
    if (buckets == previous) continue;  // a larger cap that changes nothing
    previous = buckets;
    double largest = 0;
    for (const auto& b : buckets) {
      double bytes = 0;
      for (size_t i : b) bytes += double(grads[i].bytes);
      largest = std::max(largest, bytes);
    }
    for (int priority = 1; priority <= 4; ++priority) {
      if (size_t(priority) > buckets.size()) break;
      for (double chunk_mb : {0.0, 1.0, 2.0, 4.0}) {
        if (chunk_mb * kMiB >= largest) break;  // every bucket whole anyway
        for (double ratio : {1.0, 0.9}) {
          if (chunk_mb == 0 && ratio != 1.0) continue;  // whole buckets issue when released
          OverlapSchedule s;
          s.priority_buckets = priority;
          s.chunks = {chunk_mb, ratio};
          s.forward_ratio = forward_ratio;
          const double exposed = simulate_overlap_exposed_s(grads, buckets, link, s);
          size_t collectives = 0;
          for (const auto& b : buckets) {
            double bytes = 0;
            for (size_t i : b) bytes += double(grads[i].bytes);
            collectives +=
                chunk_mb > 0 ? std::max<size_t>(1, size_t(std::ceil(bytes / (chunk_mb * kMiB)))) : 1;
          }
          const bool better =
              !have || exposed < best.predicted_exposed_s - 1e-6 ||
              (exposed <= best.predicted_exposed_s + 1e-6 &&
               (collectives < best.collectives ||
                (collectives == best.collectives && cap_mb > best.bucket_cap_mb)));
          if (better) {
            best = {cap_mb, buckets, s, exposed, collectives};
            have = true;
          }
        }
      }
    }
  }
  return best;
}

BucketPlan plan_buckets(const std::vector<GradInfo>& grads, const AlphaBeta& link) {
  check_grads("plan_buckets", grads);
  check_link("plan_buckets", link);
  const std::vector<size_t> order = ready_order(grads);
  const size_t n = order.size();
  std::vector<double> prefix_bytes(n + 1, 0);
  for (size_t k = 0; k < n; ++k) prefix_bytes[k + 1] = prefix_bytes[k] + double(grads[order[k]].bytes);
  // end[j]: the earliest the first j parameters' buckets can finish;
  // from[j]: where the last of those buckets starts.
  std::vector<double> end(n + 1, std::numeric_limits<double>::infinity());
  std::vector<size_t> from(n + 1, 0);
  end[0] = -std::numeric_limits<double>::infinity();
  for (size_t j = 1; j <= n; ++j) {
    const double ready = grads[order[j - 1]].ready_s;
    for (size_t i = 0; i < j; ++i) {  // smallest i first: ties keep bigger buckets
      const double e = std::max(end[i], ready) + link.time_s(prefix_bytes[j] - prefix_bytes[i]);
      if (e < end[j]) {
        end[j] = e;
        from[j] = i;
      }
    }
  }
  BucketPlan plan;
  for (size_t j = n; j > 0; j = from[j])
    plan.buckets.emplace_back(order.begin() + std::ptrdiff_t(from[j]),
                              order.begin() + std::ptrdiff_t(j));
  std::reverse(plan.buckets.begin(), plan.buckets.end());
  plan.predicted_exposed_s = std::max(0.0, end[n] - grads[order[n - 1]].ready_s);
  return plan;
}

// ---- the tuner -------------------------------------------------------------

BucketAutoTuner::BucketAutoTuner(Tensors params, int iterations)
    : params_(std::move(params)), iterations_(iterations) {
  DDP_CHECK_T(ValueError, iterations_ >= 1,
              "DistributedDataParallel: auto_bucket_iterations must be >= 1, got {}", iterations_);
}

void BucketAutoTuner::on_forward(Reducer& reducer, dist::ProcessGroup& group) {
  if (done_ || params_.empty()) return;
  const std::vector<std::chrono::nanoseconds> times = reducer.last_grad_ready_times();
  if (times.size() != params_.size()) return;  // no synchronised backward yet
  const uint64_t backwards = reducer.synchronised_backwards();
  if (backwards == last_seen_) return;  // no new synchronised backward since the last forward
  last_seen_ = backwards;
  if (++seen_ == 1) return;  // the first backward warms caches and allocators
  // Times since the backward's first hook; an unused parameter (-1) is
  // ready at once (Note [Unused parameters]).
  std::vector<double> sample;
  for (const auto& t : times) sample.push_back(std::max(0.0, std::chrono::duration<double>(t).count()));
  samples_.push_back(std::move(sample));
  if (int(samples_.size()) >= iterations_) tune(reducer, group);
}

void BucketAutoTuner::restore(BucketPlan plan, AlphaBeta link) {
  plan_ = std::move(plan);
  link_ = link;
  samples_.clear();
  done_ = true;
}

void BucketAutoTuner::tune(Reducer& reducer, dist::ProcessGroup& group) {
  done_ = true;
  for (const Tensor& p : params_)
    if (p.device() != params_.front().device() || p.dtype() != params_.front().dtype()) {
      DDP_LOG_WARNING(
          "DistributedDataParallel: auto_bucket_size needs every parameter on one device and "
          "dtype; keeping bucket_cap_mb buckets");
      return;
    }
  std::vector<GradInfo> grads(params_.size());
  size_t total = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    std::vector<double> at;
    for (const auto& s : samples_) at.push_back(s[i]);
    grads[i] = {median_of(at), params_[i].nbytes()};
    total += grads[i].bytes;
  }
  // Sizes spanning the buckets the plan may choose: 4 KiB and 64 KiB (where
  // alpha shows), then 1/64, 1/8 and 1/2 of all gradients (where beta does).
  std::vector<size_t> sizes = {4096, 65536};
  for (size_t div : {64, 8, 2})
    if (total / div > sizes.back() * 2) sizes.push_back(total / div);
  link_ = measure_alpha_beta(group, params_.front().device(), params_.front().dtype(), sizes);

  const std::vector<std::vector<size_t>> before = reducer.bucket_assignment();
  const bool overlap = reducer.overlap();
  // Launch order, bucket ids, then the overlapped step's schedule (priority
  // buckets, chunk size in bytes, issue ratio in millionths).
  const size_t n = params_.size();
  std::vector<int64_t> encoded(2 * n + 3, 0);
  if (group.rank() == 0) {
    OverlapSchedule schedule;
    if (overlap) {
      OverlapPlan op = plan_overlap(grads, link_);
      plan_.buckets = std::move(op.buckets);
      plan_.predicted_exposed_s = op.predicted_exposed_s;
      schedule = op.schedule;
    } else {
      plan_ = plan_buckets(grads, link_);
    }
    size_t pos = 0;
    for (size_t k = 0; k < plan_.buckets.size(); ++k)
      for (size_t i : plan_.buckets[k]) {
        encoded[pos] = int64_t(i);
        encoded[n + pos] = int64_t(k);
        ++pos;
      }
    encoded[2 * n] = schedule.priority_buckets;
    encoded[2 * n + 1] = int64_t(std::llround(schedule.chunks.chunk_mb * 1024.0 * 1024.0));
    encoded[2 * n + 2] = int64_t(std::llround(schedule.chunks.issue_ratio * 1e6));
    OverlapSchedule now;
    now.priority_buckets = reducer.priority_buckets();
    now.chunks = reducer.overlap_chunks();
    const double before_s = overlap ? simulate_overlap_exposed_s(grads, before, link_, now)
                                    : simulate_exposed_s(grads, before, link_);
    DDP_LOG_INFO(
        "DistributedDataParallel: auto_bucket_size chose {} buckets (MiB, launch order: {}){} from "
        "{} backward passes and a link of alpha {:.1f} us, {}; predicted exposed "
        "communication {:.2f} ms (the {} buckets before: {:.2f} ms)",
        plan_.buckets.size(), mib_list(plan_.buckets, grads),
        overlap ? fmt::format(" for the overlapped step, {} priority buckets, chunks {}",
                              schedule.priority_buckets,
                              schedule.chunks.chunk_mb > 0
                                  ? fmt::format("of {} MiB at issue ratio {}",
                                                schedule.chunks.chunk_mb,
                                                schedule.chunks.issue_ratio)
                                  : std::string("off"))
                : std::string(),
        samples_.size(), link_.alpha_s * 1e6,
        link_.beta_s_per_byte > 0 ? fmt::format("{:.3f} GB/s", 1e-9 / link_.beta_s_per_byte)
                                  : std::string("no measurable per-byte cost"),
        plan_.predicted_exposed_s * 1e3, before.size(), before_s * 1e3);
  }
  if (group.size() > 1) {
    const Device on = dist::control_device(group, params_.front().device());
    Tensor t = Tensor::from_vector(encoded, {int64_t(encoded.size())}).to(on);
    group.broadcast({t}, 0)->wait(group.timeout());
    encoded = t.cpu().to_vector<int64_t>();
  }
  std::vector<std::vector<size_t>> assignment;
  for (size_t pos = 0; pos < n; ++pos) {
    const int64_t k = encoded[n + pos];
    DDP_CHECK(k >= 0 && (size_t(k) == assignment.size() || size_t(k) + 1 == assignment.size()),
              "DistributedDataParallel: rank 0's bucket plan is malformed (bucket id {})", k);
    if (size_t(k) == assignment.size()) assignment.emplace_back();
    assignment.back().push_back(size_t(encoded[pos]));
  }
  reducer.rebuild_buckets(assignment);  // validates the permutation
  if (group.rank() != 0) plan_.buckets = assignment;
  if (overlap) {
    OverlapSchedule s;
    s.priority_buckets = int(encoded[2 * n]);
    s.chunks = {double(encoded[2 * n + 1]) / (1024.0 * 1024.0), double(encoded[2 * n + 2]) * 1e-6};
    reducer.set_overlap(true, s.priority_buckets, s.chunks);  // validates the schedule
    overlap_schedule_ = s;
  }
}

}  // namespace ddp::parallel
