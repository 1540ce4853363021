#include "options.h"

#include <fmt/format.h>

#include "ddp/core/error.h"

namespace bench {

namespace {

constexpr const char* kUsage = R"(usage: bench_ddp [options]
  --model NAME            resnet20 | resnet50 | gpt-tiny | gpt2 (default resnet20)
  --backend NAME          mpi | gloo | nccl | cpu:gloo,cuda:nccl ... (default: init_process_group's choice)
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
  --zero1                 also time ZeRO-1 (DDP + ZeroRedundancyOptimizer, SGD with
                          momentum) and report its optimizer-state bytes vs plain
  --help
)";

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  int64_t batch_size = o.batch_size, image_size = o.image_size, seq_len = o.seq_len,
          steps = o.steps, warmup = o.warmup, metrics_port = o.metrics_port;
  ArgParser args("bench_ddp", "");
  args.set_usage(kUsage);
  args.usage_on_error();
  args.add_string("--model", &o.model, "", {"resnet20", "resnet50", "gpt-tiny", "gpt2"});
  args.add_string("--backend", &o.backend, "");
  args.add_value("--device", "cpu|cuda", "", "cpu", [&](const std::string& v) {
    if (v == "cpu")
      o.device = ddp::Device::cpu();
    else if (v == "cuda")
      o.device = ddp::Device::cuda(0);
    else
      return fmt::format("unknown device '{}'", v);
    return std::string();
  });
  args.add_int("--batch-size", &batch_size, "", 1);
  args.add_int("--image-size", &image_size, "", 8);
  args.add_int("--seq-len", &seq_len, "", 1);
  args.add_int("--steps", &steps, "", 1);
  args.add_int("--warmup", &warmup, "", 0);
  args.add_double("--bucket-cap-mb", &o.bucket_cap_mb, "", 0.0, /*exclusive=*/true);
  args.add_value("--simulate-link", "B,L,N", "", "", [&](const std::string& v) {
    try {
      o.link = LinkModel::parse(v);
    } catch (const ddp::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  });
  args.add_string("--json", &o.json_path, "");
  args.add_string("--trace", &o.trace_path, "");
  args.add_int("--metrics-port", &metrics_port, "", 1);
  args.add_string("--job-name", &o.job_name, "");
  args.add_flag("--zero1", &o.zero1, "");
  args.parse(argc, argv);
  if (metrics_port > 65535) args.fail(fmt::format("--metrics-port: {} is above 65535", metrics_port));
  if (args.given("--job-name") && !args.given("--metrics-port"))
    args.fail("--job-name: needs --metrics-port");
  o.batch_size = int(batch_size), o.image_size = int(image_size), o.seq_len = int(seq_len);
  o.steps = int(steps), o.warmup = int(warmup), o.metrics_port = int(metrics_port);
  return o;
}

}  // namespace bench
