#include "common/bench_options.h"

#include <fmt/format.h>

#include "common/hardware.h"

namespace bench {

void add_common_options(ArgParser& args, CommonOptions& o, const std::string& sample) {
  o.device = default_device().is_cuda() ? "cuda" : "cpu";
  args.add_string("--device", &o.device,
                  "cpu, cuda or cuda:N (default cuda when a GPU exists, else cpu)", {}, "DEVICE");
  args.add_string("--amp", &o.amp, "autocast dtype; f16 adds a GradScaler", {"off", "bf16", "f16"});
  args.add_int("--warmup", &o.warmup, "untimed steps first", 0);
  args.add_int("--steps", &o.steps, "timed steps", 1);
  args.add_int("--threads", &o.threads, "CPU threads (default: OMP_NUM_THREADS or all cores)", 0);
  args.add_double("--peak-tflops", &o.peak_tflops,
                  "device peak in TFLOP/s for MFU (default: the GPU table; none on CPU)", 0.0,
                  /*exclusive=*/true);
  args.add_string("--json", &o.json_path, "write the results as one JSON object to FILE", {},
                  "FILE");
  args.add_flag("--dry-run", &o.dry_run,
                fmt::format("print the header (FLOPs per {}) and exit", sample));
}

ddp::Device common_device(const ArgParser& args, const CommonOptions& o) {
  auto d = parse_device(o.device);
  if (!d) args.fail(fmt::format("--device: '{}' is not cpu, cuda or cuda:N", o.device));
  if (o.threads > 0 && d->is_cuda()) args.fail("--threads applies to --device cpu only");
  return *d;
}

}  // namespace bench
