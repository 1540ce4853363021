#pragma once
// bench_ddp's command line.

#include <optional>
#include <string>

#include "common/cli.h"  // UsageExit
#include "ddp/core/device.h"
#include "simulated_link.h"

namespace bench {

struct Options {
  std::string model = "resnet20";  // resnet20|resnet50|gpt-tiny|gpt2
  std::string backend;             // empty: init_process_group's default
  ddp::Device device = ddp::Device::cpu();
  int batch_size = 8;              // per rank
  int image_size = 0;              // 0: the model's own (32 for resnet20, 224 for resnet50)
  int seq_len = 0;                 // 0: 64 for gpt-tiny, 1024 for gpt2
  int steps = 10;
  int warmup = 3;
  double bucket_cap_mb = 25.0;
  std::optional<LinkModel> link;
  std::string json_path, trace_path;
  int metrics_port = 0;            // 0: off; rank r serves PORT + local rank
  std::string job_name;            // the metrics' job label; empty: bench_ddp
  bool zero1 = false;              // also time DDP + ZeroRedundancyOptimizer (SGD)
};

// Raises UsageExit on --help or a bad command line (See Note [Usage errors exit 2]).
Options parse_options(int argc, char** argv);

}  // namespace bench
