#pragma once
// The standard metrics of a data-parallel training job, registered under
// one set of names so that the trainers, the benchmarks and a user's own
// program export the same series (docs/metrics.md lists them, with PromQL).
//
//   Registry registry(Labels{{"rank", "0"}, {"world_size", "2"}, {"job", "resnet"}});
//   TrainingMetrics m(registry, /*cuda=*/false);
//   m.step_seconds.observe(0.12);
//
// Plain numbers go in, so this layer needs nothing from the DDP engine;
// the programs turn the reducer's bucket timeline into bytes and waits.

#include "ddp/metrics/registry.h"

namespace ddp::metrics {

struct TrainingMetrics {
  // with_device_memory: also register ddp_device_memory_bytes (GPU ranks).
  TrainingMetrics(Registry& registry, bool with_device_memory);

  Histogram& step_seconds;            // ddp_step_seconds: wall time of one optimizer step
  Counter& steps;                     // ddp_steps_total
  Gauge& samples_per_second;          // ddp_samples_per_second: global, at the last log
  Gauge& loss;                        // ddp_loss: mean over ranks, at the last log
  Gauge& learning_rate;               // ddp_learning_rate
  Counter& allreduce_bytes;           // ddp_allreduce_bytes_total: bucket bytes this rank reduced
  Gauge& exposed_comm_seconds;        // ddp_exposed_comm_seconds: backward's wait after its last gradient
  Histogram& bucket_wait_seconds;     // ddp_bucket_wait_seconds: per bucket, gradient ready -> reduced
  Gauge& peak_memory_bytes;           // ddp_peak_memory_bytes
  Counter& restarts;                  // ddp_restarts_total: the launcher's restart count
  Gauge& straggler_score;             // ddp_straggler_score: this rank's (parallel/straggler.h)
  Gauge* device_memory_bytes;         // ddp_device_memory_bytes (null without a GPU)
};

}  // namespace ddp::metrics
