#pragma once
// Running a model benchmark and reporting it the way nccl-tests does: a
// header of '#' lines stating the configuration, the device and the FLOPs
// per sample; one result row under a two-line column heading; '#' footer
// lines; and, with --json, one JSON object with stable keys
// (docs/benchmarks.md lists them).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/core/device.h"
#include "ddp/io/json.h"
#include "train_step.h"

namespace bench {

// A flat JSON object, keys in insertion order: libddp's one JSON writer
// (ddp/io/json.h); NaN, inf and empty optionals are written as null.
using JsonObject = ddp::io::json::Object;

// What one benchmark run is; filled by each benchmark's main.
struct BenchInfo {
  std::string program;  // "bench_resnet"
  std::string model;
  ddp::Device device;
  int threads = 0;  // CPU threads in effect; unused on a GPU
  std::string amp = "off";
  int64_t batch_size = 0, warmup = 0, steps = 0;
  int64_t num_params = 0;
  std::string unit;              // "image" or "token": what one sample is
  int64_t samples_per_step = 0;  // images, or tokens (batch × sequence length)
  double flops_per_sample = 0;   // training FLOPs (Note [Benchmark FLOPs])
  std::string flops_how;         // how flops_per_sample was found, for the header
  std::string step_how;          // what a step does, for the header
  std::vector<std::string> model_lines;  // model-specific header lines
  JsonObject model_json;                 // model-specific JSON keys
  double peak_tflops = 0;                // --peak-tflops; 0: from the table
  std::string json_path;                 // empty: no JSON
  bool dry_run = false;                  // header only, no steps
};

// Prints the header, times the steps (time_training), prints the result and
// writes the JSON. Returns main's exit status. IoError when the JSON file
// cannot be written.
int run_and_report(const BenchInfo& info, TrainSetup& setup);

}  // namespace bench
