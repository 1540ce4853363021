// bench_optim: the optimizer step alone, on a ResNet's parameters, in each
// memory layout (issue 29; docs/benchmarks.md).
//
//   bench_optim --model resnet50 --optimizer sgd --threads 2 --steps 20
//
// Times `--steps` calls of step() after `--warmup` untimed ones, for three
// layouts of the same parameters, in one run:
//   contiguous      parameters and gradients NCHW;
//   channels-last   parameters and gradients NHWC: updated in place as flat
//                   blocks (Note [Optimizer tensors in any dense layout]);
//   mixed           NHWC parameters with NCHW gradients: the path that still
//                   stages each 4-D parameter, its gradient and its state
//                   through contiguous copies, as every channels-last
//                   parameter was before that Note.
// Prints one line per layout (median, p10, p90 step time in ms) and, with
// --json, the same as an object keyed by layout.

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>

#include "common/cli.h"
#include "common/hardware.h"
#include "common/models.h"
#include "common/stats.h"
#include "ddp/io/json.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/optim/adamw.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/memory_format.h"
#include "ddp/tensor/ops.h"

namespace bench {
namespace {

struct Options {
  std::string model = "resnet50", optimizer = "sgd", json_path;
  int64_t warmup = 3, steps = 20, threads = 0;
};

StepStats time_layout(const Options& o, const std::string& layout) {
  ddp::manual_seed(1234);
  auto model = make_resnet(o.model);
  if (layout != "contiguous") model->to(ddp::MemoryFormat::channels_last);
  ddp::Tensors params = model->parameters();
  ddp::Generator gen(7);
  for (ddp::Tensor& p : params) {
    ddp::Tensor g = ddp::mul(ddp::randn(p.shape(), {}, &gen), 1e-3);  // contiguous
    // Gradients in the parameter's layout, except in "mixed".
    if (layout == "channels-last" && p.dim() == 4) g = ddp::nn::functional::to_channels_last(g);
    p.set_grad(g);
  }
  std::unique_ptr<ddp::optim::Optimizer> opt;
  if (o.optimizer == "sgd")
    opt = std::make_unique<ddp::optim::SGD>(params, 0.01,
                                            ddp::optim::SGDOptions{.momentum = 0.9, .weight_decay = 1e-4});
  else
    opt = std::make_unique<ddp::optim::AdamW>(params, 1e-3, ddp::optim::AdamWOptions{.weight_decay = 0.05});
  std::vector<double> seconds;
  for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    opt->step();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s >= o.warmup) seconds.push_back(dt);
  }
  return summarize(seconds);
}

int run(const Options& o) {
  const int threads = set_cpu_threads(int(o.threads));
  std::printf("# bench_optim: %s step on %s's parameters, cpu, %d thread(s), %lld steps after %lld warmup\n",
              o.optimizer.c_str(), o.model.c_str(), threads, (long long)o.steps, (long long)o.warmup);
  std::printf("# %-14s %10s %10s %10s\n", "layout", "median_ms", "p10_ms", "p90_ms");
  ddp::io::json::Object json;
  json.add("program", "bench_optim").add("model", o.model).add("optimizer", o.optimizer)
      .add("threads", threads).add("steps", o.steps);
  for (const char* layout : {"contiguous", "channels-last", "mixed"}) {
    const StepStats st = time_layout(o, layout);
    std::printf("  %-14s %10.2f %10.2f %10.2f\n", layout, 1e3 * st.median, 1e3 * st.p10, 1e3 * st.p90);
    std::fflush(stdout);
    json.add(layout, ddp::io::json::Object()
                         .add("median_ms", 1e3 * st.median)
                         .add("p10_ms", 1e3 * st.p10)
                         .add("p90_ms", 1e3 * st.p90));
  }
  if (!o.json_path.empty()) std::ofstream(o.json_path) << json.str() << "\n";
  return 0;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  return bench::guarded_main("bench_optim", [&] {
    bench::Options o;
    bench::ArgParser args("bench_optim",
                          "Times the optimizer step alone on a ResNet's parameters, contiguous,\n"
                          "channels-last, and channels-last with contiguous gradients (staged).");
    args.add_string("--model", &o.model, "the ResNet", bench::resnet_names());
    args.add_string("--optimizer", &o.optimizer, "the optimizer", {"sgd", "adamw"});
    args.add_int("--warmup", &o.warmup, "untimed steps", 0);
    args.add_int("--steps", &o.steps, "timed steps", 1);
    args.add_int("--threads", &o.threads, "CPU threads (0: the default)", 0);
    args.add_string("--json", &o.json_path, "also write the results to this file");
    args.parse(argc, argv);
    return bench::run(o);
  });
}
