#pragma once
// The load test's trainer: a small MLP trained with SGD on a fixed
// synthetic regression task, exporting the standard training metrics
// (ddp::metrics::TrainingMetrics) every step, as a trainer does.

#include <vector>

#include "ddp/metrics/training_metrics.h"

namespace ddp::metrics::load {

struct TrainResult {
  std::vector<float> parameters;   // every parameter, flattened, after the last step
  std::vector<double> step_seconds;
  std::vector<double> step_cpu_seconds;  // CPU time of the whole process (server thread included)
  std::vector<double> step_thread_cpu_seconds;  // CPU time of the calling (training) thread alone
  double final_loss = 0;
};

// Trains `steps` steps from a fixed seed: two calls give bit-identical
// parameters unless something disturbed the computation.
TrainResult train(int steps, TrainingMetrics& metrics);

}  // namespace ddp::metrics::load
