#include "common/monitoring.h"

#include <algorithm>
#include <exception>

#include "common/trainer_util.h"
#include "ddp/core/error.h"
#include "ddp/tensor/cuda.h"

namespace examples {

Monitor::Monitor(const MonitorOptions& o, ddp::dist::World& world, const std::string& program)
    : device_(world.device), rank_(world.rank()) {
  std::exception_ptr failure;
  try {
    if (o.metrics_port > 0) {
      const int64_t port = o.metrics_port + world.env.local_rank;
      if (port > 65535)
        throw ddp::ValueError("--metrics-port " + std::to_string(o.metrics_port) + ": local rank " +
                              std::to_string(world.env.local_rank) + " would serve port " +
                              std::to_string(port) + ", above 65535");
      registry_ = std::make_unique<ddp::metrics::Registry>(ddp::metrics::Labels{
          {"job", o.job_name.empty() ? program : o.job_name},
          {"rank", std::to_string(world.rank())},
          {"world_size", std::to_string(world.size())}});
      metrics_ = std::make_unique<ddp::metrics::TrainingMetrics>(*registry_, device_.is_cuda());
      metrics_->restarts.inc(world.env.restart_count);
      server_ = std::make_unique<ddp::metrics::MetricsServer>(*registry_, int(port));
    }
    if (!o.tensorboard_dir.empty() && world.rank() == 0)
      events_ = std::make_unique<ddp::metrics::EventFileWriter>(o.tensorboard_dir);
  } catch (...) {
    failure = std::current_exception();
  }
  const double failed_ranks = allreduce_sum(world, {failure ? 1.0 : 0.0})[0];
  if (failure) std::rethrow_exception(failure);
  if (failed_ranks > 0)
    throw ddp::Error("monitoring could not start on " + std::to_string(int(failed_ranks)) +
                     " other rank(s) (--metrics-port / --tensorboard; see their message)");
  // Every rank or none (the trainers pass the same flag to every rank): the
  // detector's exchange is a collective.
  if (o.straggler_interval > 0)
    stragglers_ = std::make_unique<ddp::parallel::StragglerDetector>(
        world.group, ddp::parallel::StragglerOptions{.interval = o.straggler_interval},
        world.device);
}

void Monitor::step_done(double step_s, const std::vector<ddp::parallel::BucketTiming>& timeline,
                        Clock::time_point backward_end) {
  // The time backward still waited after its last gradient was ready: the
  // communication not hidden behind compute (bench_ddp's tail wait).
  Clock::time_point last_ready = Clock::time_point::min();
  for (const auto& b : timeline) last_ready = std::max(last_ready, b.ready);
  const double exposed =
      timeline.empty() ? 0.0
                       : std::max(0.0, std::chrono::duration<double>(backward_end - last_ready).count());
  exposed_sum_ += exposed;
  ++exposed_steps_;
  // Before the early return: the exchange is a collective, with or without metrics.
  if (stragglers_ && stragglers_->observe(timeline) && metrics_)
    metrics_->straggler_score.set(stragglers_->score(rank_));
  if (!metrics_) return;
  metrics_->step_seconds.observe(step_s);
  metrics_->steps.inc();
  metrics_->exposed_comm_seconds.set(exposed);
  double bytes = 0;
  for (const auto& b : timeline) {
    bytes += double(b.bytes);
    metrics_->bucket_wait_seconds.observe(std::chrono::duration<double>(b.done - b.ready).count());
  }
  metrics_->allreduce_bytes.inc(bytes);
}

void Monitor::logged(int64_t step, double loss, double lr, double samples_per_s,
                     const std::string& rate_name, double rate, double peak_memory_mib) {
  const double exposed_mean = exposed_steps_ > 0 ? exposed_sum_ / double(exposed_steps_) : 0.0;
  exposed_sum_ = 0;
  exposed_steps_ = 0;
  progress(samples_per_s, peak_memory_mib);
  if (metrics_) {
    metrics_->loss.set(loss);
    metrics_->learning_rate.set(lr);
  }
  if (events_) {
    events_->add_scalar("train/loss", loss, step);
    events_->add_scalar("train/lr", lr, step);
    events_->add_scalar("train/" + rate_name, rate, step);
    events_->add_scalar("comm/exposed_s", exposed_mean, step);
  }
}

void Monitor::progress(double samples_per_s, double peak_memory_mib) {
  if (!metrics_) return;
  metrics_->samples_per_second.set(samples_per_s);
  metrics_->peak_memory_bytes.set(peak_memory_mib * (1 << 20));
  if (metrics_->device_memory_bytes != nullptr)
    metrics_->device_memory_bytes->set(double(ddp::cuda::memory_stats(device_.index).allocated_bytes));
}

void Monitor::scalar(const std::string& tag, double value, int64_t step) {
  if (events_) events_->add_scalar(tag, value, step);
}

}  // namespace examples
