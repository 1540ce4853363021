#pragma once
// The options bench_resnet and bench_gpt share (docs/benchmarks.md):
// --device --amp --warmup --steps --threads --peak-tflops --json --dry-run.
// Each benchmark's Options derives from CommonOptions and adds its model's.

#include <cstdint>
#include <string>

#include "common/cli.h"
#include "ddp/core/device.h"

namespace bench {

struct CommonOptions {
  std::string device;  // cpu, cuda or cuda:N; add_common_options sets the default
  std::string amp = "off";
  int64_t warmup = 0, steps = 0, threads = 0;  // each benchmark sets its defaults
  double peak_tflops = 0;
  std::string json_path;
  bool dry_run = false;
};

// Registers the shared options on args, with o's current values as the
// defaults; `sample` ("image", "token") names what --dry-run's FLOPs are per.
void add_common_options(ArgParser& args, CommonOptions& o, const std::string& sample);

// After args.parse(): the device --device names. A bad device, or --threads
// with a GPU, fails the command line (Note [Benchmark usage errors]).
ddp::Device common_device(const ArgParser& args, const CommonOptions& o);

}  // namespace bench
