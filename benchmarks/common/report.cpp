#include "report.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "ddp/core/error.h"
#include "ddp/io/json.h"
#include "ddp/version.h"
#include "hardware.h"
#include "stats.h"

namespace bench {

// ---- the report --------------------------------------------------------------

namespace {

// The peak that MFU divides by (Note [Peak FLOPs for MFU]): --peak-tflops,
// else the table's entry for the GPU; none on the CPU.
std::optional<PeakFlops> peak_for(const BenchInfo& info, const std::string& name) {
  if (info.peak_tflops > 0) return PeakFlops{info.peak_tflops, "--peak-tflops"};
  if (!info.device.is_cuda()) return std::nullopt;
  return lookup_peak_flops(name, info.amp);
}

// "1,234,567", easier to read than 1234567 for parameter counts.
std::string grouped(int64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

void print_header(const BenchInfo& info, const std::string& name,
                  const std::optional<PeakFlops>& peak) {
  fmt::print("# {}: libddp {}, model {} ({} parameters)\n", info.program, DDP_VERSION_STRING,
             info.model, grouped(info.num_params));
  for (const std::string& l : info.model_lines) fmt::print("# {}\n", l);
  if (info.device.is_cuda())
    fmt::print("# device {} ({}); amp {}\n", info.device.str(), name, info.amp);
  else
    fmt::print("# device {}, threads {}; amp {}\n", name, info.threads, info.amp);
  fmt::print("# batch {} ({} {}s per step); {} warm-up + {} timed steps; synthetic data made on "
             "the device before timing\n",
             info.batch_size, info.samples_per_step, info.unit, info.warmup, info.steps);
  fmt::print("# step: {}\n", info.step_how);
  fmt::print("# FLOPs per {}: {:.4g} GFLOP ({})\n", info.unit, info.flops_per_sample / 1e9,
             info.flops_how);
  if (peak)
    fmt::print("# MFU peak: {:g} TFLOP/s ({})\n", peak->tflops, peak->what);
  else
    fmt::print("# MFU peak: n/a ({}; pass --peak-tflops X)\n",
               info.device.is_cuda() ? "no entry for this GPU" : "no peak known for a CPU");
  std::fflush(stdout);
}

}  // namespace

int run_and_report(const BenchInfo& info, TrainSetup& setup) {
  const std::string name = device_name(info.device);
  const std::optional<PeakFlops> peak = peak_for(info, name);
  print_header(info, name, peak);
  if (info.dry_run) return 0;

  reset_peak_memory(info.device);
  const Timing timing = time_training(setup, info.warmup, info.steps);
  const StepStats st = summarize(timing.step_s);
  const PeakMemory mem = peak_memory(info.device);
  const double per_s = double(info.samples_per_step) / st.median;
  const double tflops = per_s * info.flops_per_sample / 1e12;
  const std::optional<double> mfu =
      peak ? std::optional<double>(tflops / peak->tflops) : std::nullopt;

  const std::string rate = info.unit + "s/s";
  fmt::print("#\n#{:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12} {:>9} {:>7} {:>10}\n", "batch",
             "median", "p10", "p90", "min", "max", rate, "TFLOP/s", "MFU", "peak mem");
  fmt::print("#{:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12} {:>9} {:>7} {:>10}\n", "", "(ms)",
             "(ms)", "(ms)", "(ms)", "(ms)", "", "", "", "(MiB)");
  fmt::print(" {:>7} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>12.1f} {:>9.4f} {:>7} {:>10.1f}\n",
             info.batch_size, st.median * 1e3, st.p10 * 1e3, st.p90 * 1e3, st.min * 1e3,
             st.max * 1e3, per_s, tflops, mfu ? fmt::format("{:.1f}%", 100 * *mfu) : "n/a",
             mem.mib);
  fmt::print("# peak memory: {}\n",
             mem.source == "cuda_allocator"
                 ? "the CUDA caching allocator's peak of bytes in tensors during the steps"
                 : "the process's peak resident set since it started (max RSS; libddp's CPU "
                   "allocator keeps no statistics)");
  if (info.amp == "f16")
    fmt::print("# GradScaler skipped {} of {} timed steps\n", timing.skipped_steps, info.steps);
  fmt::print("# last loss {:.4f}\n#\n", timing.last_loss);
  std::fflush(stdout);

  if (info.json_path.empty()) return 0;
  JsonObject j;
  j.add("benchmark", info.program)
      .add("libddp_version", DDP_VERSION_STRING)
      .add("model", info.model)
      .add("device", info.device.str())
      .add("device_name", name)
      .add("threads", info.device.is_cuda() ? std::optional<double>() : double(info.threads))
      .add("batch_size", info.batch_size)
      .append(info.model_json)
      .add("amp", info.amp)
      .add("warmup", info.warmup)
      .add("steps", info.steps)
      .add("num_params", info.num_params)
      .add("flops_per_sample", info.flops_per_sample)
      .add("step_s_median", st.median)
      .add("step_s_p10", st.p10)
      .add("step_s_p90", st.p90)
      .add("step_s_min", st.min)
      .add("step_s_max", st.max)
      .add("step_s_mean", st.mean)
      .add(info.unit + "s_per_s", per_s)
      .add("tflops", tflops)
      .add("peak_tflops", peak ? std::optional<double>(peak->tflops) : std::nullopt)
      .add("peak_tflops_source", peak ? std::optional<std::string>(peak->what) : std::nullopt)
      .add("mfu", mfu)
      .add("peak_memory_mib", mem.mib)
      .add("peak_memory_source", mem.source)
      .add("skipped_steps", timing.skipped_steps)
      .add("last_loss", timing.last_loss);
  std::ofstream out(info.json_path);
  out << j.str() << "\n";
  out.flush();
  if (!out) throw ddp::IoError(fmt::format("--json: cannot write '{}'", info.json_path));
  return 0;
}

}  // namespace bench
