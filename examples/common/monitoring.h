#pragma once
// Live monitoring of the example trainers and bench_ddp: Prometheus metrics
// served by every rank (--metrics-port) and TensorBoard scalars written by
// rank 0 (--tensorboard). docs/metrics.md lists the series.
//
// Note [Monitoring starts on every rank or on none]
// Each rank opens its own port (PORT + LOCAL_RANK) and rank 0 its event
// file, so one rank can fail where the others succeed (a port taken on one
// node, a read-only folder). Were that rank simply to exit, the others would
// wait in the DDP constructor's broadcast until a timeout. So the Monitor
// constructor is a collective: every rank tries, the ranks sum their
// failures in one allreduce, and then all of them throw — the failing rank
// its own error (naming the port or folder), the others one that says so —
// before any training step.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/dist/init.h"
#include "ddp/metrics/event_file.h"
#include "ddp/metrics/registry.h"
#include "ddp/metrics/server.h"
#include "ddp/metrics/training_metrics.h"
#include "ddp/parallel/reducer.h"
#include "ddp/parallel/straggler.h"

namespace examples {

struct MonitorOptions {
  int64_t metrics_port = 0;     // 0: no metrics server; rank r serves PORT + its local rank
  std::string job_name;         // the `job` label; empty: the program's name
  std::string tensorboard_dir;  // empty: no event file
  // > 0: every rank runs a StragglerDetector with this interval (a tiny
  // allgather every that many steps; Note [Straggler score]) and exports its
  // own score as ddp_straggler_score; 0: off.
  int64_t straggler_interval = 0;
};

class Monitor {
 public:
  using Clock = std::chrono::steady_clock;

  // A collective (Note [Monitoring starts on every rank or on none]).
  Monitor(const MonitorOptions& options, ddp::dist::World& world, const std::string& program);
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  bool serving() const { return server_ != nullptr; }
  int port() const { return server_ ? server_->port() : 0; }

  // After each optimizer step: its wall time, and the reducer's bucket
  // timeline of that step's (synchronised) backward, which ended at
  // `backward_end`. Counts the allreduced bytes, each bucket's wait and the
  // exposed communication. A collective every straggler_interval calls:
  // every rank calls it once per step.
  void step_done(double step_s, const std::vector<ddp::parallel::BucketTiming>& timeline,
                 Clock::time_point backward_end);

  // At each logging step: the figures of the metrics line. Sets the gauges
  // and writes train/loss, train/lr, train/<rate_name>, comm/exposed_s
  // (mean since the last log) to TensorBoard.
  void logged(int64_t step, double loss, double lr, double samples_per_s,
              const std::string& rate_name, double rate, double peak_memory_mib);

  // Throughput and memory alone (bench_ddp, which has no loss to report);
  // logged() calls it too.
  void progress(double samples_per_s, double peak_memory_mib);

  // One more TensorBoard scalar (rank 0; no-op without --tensorboard).
  void scalar(const std::string& tag, double value, int64_t step);

 private:
  ddp::Device device_;
  std::unique_ptr<ddp::metrics::Registry> registry_;
  std::unique_ptr<ddp::metrics::TrainingMetrics> metrics_;
  std::unique_ptr<ddp::metrics::MetricsServer> server_;
  std::unique_ptr<ddp::metrics::EventFileWriter> events_;
  std::unique_ptr<ddp::parallel::StragglerDetector> stragglers_;
  int rank_ = 0;
  double exposed_sum_ = 0;
  int64_t exposed_steps_ = 0;
};

}  // namespace examples
