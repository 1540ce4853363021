#include "ddp/metrics/training_metrics.h"

namespace ddp::metrics {

namespace {
// 1 ms .. ~65 s in powers of two: from a tiny CPU model to a large GPU step.
std::vector<double> step_buckets() { return exponential_buckets(0.001, 2, 17); }
// 10 us .. ~2.6 s: one bucket's allreduce, on a fast link or a slow one.
std::vector<double> wait_buckets() { return exponential_buckets(1e-5, 4, 10); }
}  // namespace

TrainingMetrics::TrainingMetrics(Registry& r, bool with_device_memory)
    : step_seconds(r.histogram("ddp_step_seconds", "Wall time of one optimizer step on this rank.",
                               {}, step_buckets()).get()),
      steps(r.counter("ddp_steps_total", "Optimizer steps taken by this rank.").get()),
      samples_per_second(r.gauge("ddp_samples_per_second",
                                 "Training samples per second over all ranks, over the last "
                                 "logging interval.").get()),
      loss(r.gauge("ddp_loss", "Training loss averaged over ranks and the last logging "
                   "interval.").get()),
      learning_rate(r.gauge("ddp_learning_rate", "Learning rate of the first parameter "
                            "group.").get()),
      allreduce_bytes(r.counter("ddp_allreduce_bytes_total",
                                "Gradient bytes this rank allreduced in DDP buckets.").get()),
      exposed_comm_seconds(r.gauge("ddp_exposed_comm_seconds",
                                   "Seconds the last backward waited for communication after its "
                                   "last gradient was ready (not hidden behind compute).").get()),
      bucket_wait_seconds(r.histogram("ddp_bucket_wait_seconds",
                                      "Seconds from a bucket's last gradient being ready to its "
                                      "allreduce completing.",
                                      {}, wait_buckets()).get()),
      peak_memory_bytes(r.gauge("ddp_peak_memory_bytes",
                                "Peak memory of this rank: the caching allocator's peak on a GPU, "
                                "else the peak resident set.").get()),
      restarts(r.counter("ddp_restarts_total",
                         "Times the launcher restarted the worker group before this "
                         "attempt.").get()),
      straggler_score(r.gauge("ddp_straggler_score",
                              "Share of the last measured steps in which the other ranks waited "
                              "for this rank (0..1; Note [Straggler score]).").get()),
      device_memory_bytes(with_device_memory
                              ? &r.gauge("ddp_device_memory_bytes",
                                         "GPU memory handed out to tensors now.").get()
                              : nullptr) {}

}  // namespace ddp::metrics
