#include "options.h"

#include <fmt/format.h>

#include <cstdlib>
#include <vector>

#include "ddp/core/error.h"

namespace bench {

namespace {

constexpr const char* kUsage = R"(usage: bench_ddp [options]
  --model NAME            resnet20 | resnet50 | gpt-tiny | gpt2 (default resnet20)
  --backend NAME          mpi | gloo | nccl (default: init_process_group's choice)
  --device cpu|cuda       where the model runs (default cpu; cuda uses the local rank's GPU)
  --batch-size N          samples per rank (default 8)
  --image-size N          resnet input side (default 32 for resnet20, 224 for resnet50)
  --seq-len N             gpt sequence length (default 64 for gpt-tiny, 1024 for gpt2)
  --steps N               timed steps per measurement (default 10)
  --warmup N              untimed steps before them (default 3)
  --bucket-cap-mb X       DDP bucket size in MiB (default 25)
  --simulate-link B,L,N   add to every allreduce the time of a ring allreduce over N ranks
                          on links of B Gbit/s and L microseconds latency (e.g. 100,5,8)
  --json FILE             write the figures as one JSON object
  --trace FILE            write the last DDP step's bucket timeline (Chrome trace JSON;
                          FILE.rankR per rank when there are several)
  --metrics-port PORT     serve Prometheus metrics at /metrics on PORT + local rank
  --job-name NAME         the metrics' job label (default bench_ddp)
  --help
)";

[[noreturn]] void usage_error(const std::string& msg) {
  throw UsageExit(fmt::format("bench_ddp: {}\n{}", msg, kUsage), 2);
}

int to_int(const std::string& flag, const std::string& v, int lo) {
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') usage_error(fmt::format("{}: '{}' is not an integer", flag, v));
  if (x < lo) usage_error(fmt::format("{}: {} must be at least {}", flag, x, lo));
  return int(x);
}

double to_double(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') usage_error(fmt::format("{}: '{}' is not a number", flag, v));
  return x;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") throw UsageExit(kUsage, 0);
    if (a.rfind("--", 0) != 0) usage_error(fmt::format("unexpected argument '{}'", a));
    if (i + 1 >= args.size()) usage_error(fmt::format("{}: missing value", a));
    const std::string& v = args[++i];
    if (a == "--model") {
      if (v != "resnet20" && v != "resnet50" && v != "gpt-tiny" && v != "gpt2")
        usage_error(fmt::format("unknown model '{}'", v));
      o.model = v;
    } else if (a == "--backend") {
      o.backend = v;
    } else if (a == "--device") {
      if (v == "cpu") o.device = ddp::Device::cpu();
      else if (v == "cuda") o.device = ddp::Device::cuda(0);
      else usage_error(fmt::format("unknown device '{}'", v));
    } else if (a == "--batch-size") {
      o.batch_size = to_int(a, v, 1);
    } else if (a == "--image-size") {
      o.image_size = to_int(a, v, 8);
    } else if (a == "--seq-len") {
      o.seq_len = to_int(a, v, 1);
    } else if (a == "--steps") {
      o.steps = to_int(a, v, 1);
    } else if (a == "--warmup") {
      o.warmup = to_int(a, v, 0);
    } else if (a == "--bucket-cap-mb") {
      o.bucket_cap_mb = to_double(a, v);
      if (!(o.bucket_cap_mb > 0)) usage_error(fmt::format("--bucket-cap-mb: {} must be > 0", v));
    } else if (a == "--simulate-link") {
      try {
        o.link = LinkModel::parse(v);
      } catch (const ddp::Error& e) {
        usage_error(e.what());
      }
    } else if (a == "--json") {
      o.json_path = v;
    } else if (a == "--trace") {
      o.trace_path = v;
    } else if (a == "--metrics-port") {
      o.metrics_port = to_int(a, v, 1);
      if (o.metrics_port > 65535) usage_error(fmt::format("--metrics-port: {} is above 65535", v));
    } else if (a == "--job-name") {
      o.job_name = v;
    } else {
      usage_error(fmt::format("unknown option '{}'", a));
    }
  }
  if (!o.job_name.empty() && o.metrics_port == 0) usage_error("--job-name: needs --metrics-port");
  return o;
}

}  // namespace bench
