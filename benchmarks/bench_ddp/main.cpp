// bench_ddp: how much of DDP's communication hides behind backward.
//
//   bench_ddp --model resnet50 --batch-size 8 --image-size 112 --simulate-link 100,5,8 --json r.json
//   mpirun -np 2 bench_ddp --model resnet20 --backend mpi --trace t.json
//
// For one model and backend it times a training step (forward, loss,
// backward, SGD step) three ways: without DDP, with DDP, and with DDP under
// no_sync (DDP's bookkeeping without communication); and, on its own, the
// allreduce of all gradients in the same buckets. From these:
//   exposed_comm_s  = median over rounds of (ddp step - no_sync step)   (communication not hidden)
//   hidden_fraction = 1 - exposed_comm_s / allreduce_s
// --trace writes the last DDP step's bucket timeline as Chrome trace JSON.
// Usage and results: docs/benchmarks.md.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "bench_model.h"
#include "common/monitoring.h"
#include "common/metrics.h"
#include "ddp/io/json.h"
#include "ddp/parallel/zero.h"
#include "ddp/dist/init.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/distributed.h"
#include "ddp/tensor/cuda.h"
#include "ddp/version.h"
#include "options.h"
#include "simulated_link.h"

namespace bench {
namespace {

using Clock = std::chrono::steady_clock;
using ddp::Tensor;
using ddp::Tensors;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void sync_device(const ddp::Device& d) {
  if (d.is_cuda()) ddp::cuda::synchronize(d.index);
}

struct Stats {
  double median = 0, min = 0, max = 0;
};
Stats stats_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// The slowest rank's value: a step is as slow as its slowest rank. On the
// host when the group takes host tensors (the default cpu:gloo,cuda:nccl
// group routes it to gloo), else on `device` (a bare nccl group).
double max_over_ranks(ddp::dist::ProcessGroup& g, double v, ddp::Device device) {
  Tensor t = Tensor::full({1}, v,
                          ddp::TensorOptions(ddp::DType::f64)
                              .device(ddp::dist::control_device(g, device)));
  g.allreduce({t}, ddp::dist::ReduceOp::max)->wait(g.timeout());
  return t.cpu().item<double>();
}

// Note [Interleaved timing]
// The modes are timed in rounds, one step of each per round, after `warmup`
// untimed rounds: a machine whose speed drifts (another job, frequency
// changes) then slows every mode alike, instead of whichever ran last.
// Returns the per-round times of each mode (mode-major).
std::vector<std::vector<double>> time_interleaved(const Options& o, ddp::dist::ProcessGroup& g,
                                                  const std::vector<std::function<void()>>& modes) {
  for (int i = 0; i < o.warmup; ++i)
    for (const auto& fn : modes) fn();
  std::vector<std::vector<double>> t(modes.size());
  for (int i = 0; i < o.steps; ++i)
    for (size_t m = 0; m < modes.size(); ++m) {
      g.barrier()->wait(g.timeout());
      auto start = Clock::now();
      modes[m]();
      sync_device(o.device);
      t[m].push_back(max_over_ranks(g, seconds(Clock::now() - start), o.device));
    }
  return t;
}

// The median over rounds of a[i] - b[i]: two modes compared within each
// round, so what drifts between rounds cancels.
double paired_median(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d;
  for (size_t i = 0; i < a.size(); ++i) d.push_back(a[i] - b[i]);
  return stats_of(d).median;
}

// All gradients allreduced once, in DDP's buckets, with nothing to hide behind.
std::function<void()> allreduce_all(const Options& o, ddp::dist::ProcessGroup& g,
                                    const std::vector<size_t>& bucket_bytes, ddp::DType dtype) {
  auto buffers = std::make_shared<Tensors>();
  for (size_t b : bucket_bytes)
    buffers->push_back(Tensor::zeros({int64_t(b / ddp::element_size(dtype))},
                                     ddp::TensorOptions(dtype).device(o.device)));
  return [buffers, &g] {
    std::vector<ddp::dist::WorkPtr> work;
    for (Tensor& b : *buffers) work.push_back(g.allreduce({b}, ddp::dist::ReduceOp::avg));
    for (auto& w : work) w->wait(g.timeout());
  };
}

void write_trace(const std::string& path, int rank, Clock::time_point backward_start,
                 Clock::time_point backward_end,
                 const std::vector<ddp::parallel::BucketTiming>& timeline) {
  auto us = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - backward_start).count();
  };
  // Microseconds to 0.1 us, as Chrome's trace viewer shows them.
  auto tenth = [](double v) { return std::round(v * 10) / 10; };
  using ddp::io::json::Object;
  ddp::io::json::Array events;
  events.push(Object().add("name", "backward").add("ph", "X").add("pid", rank).add("tid", 0)
                  .add("ts", 0).add("dur", tenth(us(backward_end))));
  for (const auto& b : timeline) {
    events.push(Object().add("name", fmt::format("bucket {} ready", b.index)).add("ph", "i")
                    .add("s", "t").add("pid", rank).add("tid", 0).add("ts", tenth(us(b.ready))));
    events.push(Object()
                    .add("name", fmt::format("allreduce bucket {} ({:.2f} MiB)", b.index,
                                             double(b.bytes) / (1 << 20)))
                    .add("ph", "X").add("pid", rank).add("tid", 1)
                    .add("ts", tenth(us(b.launched)))
                    .add("dur", tenth(us(b.done) - us(b.launched))));
  }
  const char* threads[] = {"compute (backward)", "communication"};
  for (int tid = 0; tid < 2; ++tid)
    events.push(Object().add("name", "thread_name").add("ph", "M").add("pid", rank)
                    .add("tid", tid).add("args", Object().add("name", threads[tid])));
  std::ofstream(path) << Object().add("traceEvents", events).pretty(1) << "\n";
}

int run(const Options& o) {
  ddp::dist::InitOptions init;
  init.backend = o.backend;
  init.device = o.device;
  ddp::dist::World world = ddp::dist::init_process_group(init);
  std::shared_ptr<ddp::dist::ProcessGroup> group = world.group;
  std::string link_text = "none";
  if (o.link) {
    group = std::make_shared<SimulatedLinkGroup>(world.group, *o.link);
    link_text = o.link->describe();
  }
  const bool rank0 = world.rank() == 0;
  // See Note [Monitoring starts on every rank or on none].
  examples::Monitor monitor(
      {.metrics_port = o.metrics_port, .job_name = o.job_name, .tensorboard_dir = ""}, world,
      "bench_ddp");

  BenchModel plain = make_bench_model(o);
  BenchModel wrapped = make_bench_model(o);
  ddp::parallel::DDPOptions dopts;
  dopts.bucket_cap_mb = o.bucket_cap_mb;
  auto ddp_model = std::make_shared<ddp::parallel::DistributedDataParallel<ddp::nn::UnaryModule>>(
      wrapped.module, group, dopts);
  ddp::optim::SGD opt_plain(plain.module->parameters(), 0.01, {.momentum = 0.9});
  ddp::optim::SGD opt_ddp(wrapped.module->parameters(), 0.01, {.momentum = 0.9});
  Batch batch = make_batch(o, world.rank());

  // --zero1: a third copy under DDP + ZeRO-1 (ddp/parallel/zero.h), whose
  // buckets must stay put (rebuild_buckets = false).
  std::optional<BenchModel> zeroed;
  std::shared_ptr<ddp::parallel::DistributedDataParallel<ddp::nn::UnaryModule>> zero_model;
  std::unique_ptr<ddp::parallel::ZeroRedundancyOptimizer> opt_zero;
  std::function<void()> step_zero = [] {};
  if (o.zero1) {
    zeroed = make_bench_model(o);
    ddp::parallel::DDPOptions zopts = dopts;
    zopts.rebuild_buckets = false;
    zero_model = std::make_shared<ddp::parallel::DistributedDataParallel<ddp::nn::UnaryModule>>(
        zeroed->module, group, zopts);
    opt_zero = std::make_unique<ddp::parallel::ZeroRedundancyOptimizer>(
        *zero_model, ddp::parallel::zero_sgd(0.01, {.momentum = 0.9}));
    step_zero = [&] {
      zeroed->loss(zero_model->forward(batch.x), batch.y).backward();
      opt_zero->step();
      opt_zero->zero_grad();
    };
  }

  Clock::time_point bw_start, bw_end, bw_start_ddp, bw_end_ddp;
  auto step_plain = [&] {
    plain.loss(plain.module->forward(batch.x), batch.y).backward();
    opt_plain.step();
    opt_plain.zero_grad();
  };
  auto step_ddp = [&] {
    Tensor loss = wrapped.loss(ddp_model->forward(batch.x), batch.y);
    bw_start = Clock::now();
    loss.backward();
    bw_end = Clock::now();
    opt_ddp.step();
    opt_ddp.zero_grad();
  };
  // How long backward waited for communication after its last gradient was
  // ready: the exposed communication as the bucket timeline sees it.
  std::vector<double> tail_waits;
  int64_t synced_steps = 0;
  auto step_synced = [&] {
    const auto start = Clock::now();
    step_ddp();
    bw_start_ddp = bw_start;
    bw_end_ddp = bw_end;
    Clock::time_point last_ready = bw_start;
    for (const auto& b : ddp_model->reducer().last_timeline())
      last_ready = std::max(last_ready, b.ready);
    tail_waits.push_back(seconds(bw_end - last_ready));
    if (monitor.serving()) {  // the step's own figures; the clock stops before this
      const double step_s = seconds(Clock::now() - start);
      monitor.step_done(step_s, ddp_model->reducer().last_timeline(), bw_end);
      // Memory is read every 10 steps: /proc is slower than a tiny step.
      if (synced_steps++ % 10 == 0)
        monitor.progress(double(o.batch_size) * world.size() / step_s,
                         examples::peak_memory_mib(o.device));
    }
  };
  auto step_no_sync = [&] {
    auto guard = ddp_model->no_sync();
    step_ddp();
  };

  if (rank0) {
    fmt::print("# bench_ddp: libddp {}, model {} ({} parameters, {:.1f} MiB of gradients)\n",
               DDP_VERSION_STRING, o.model, plain.num_params,
               double(plain.grad_bytes) / (1 << 20));
    fmt::print("# backend {} x {} ranks, device {}, batch {} per rank, bucket_cap_mb {}\n",
               world.group->backend_name(), world.size(), o.device.str(), o.batch_size,
               o.bucket_cap_mb);
    fmt::print("# simulated link: {}\n", link_text);
  }
  // One DDP step first, so the buckets are rebuilt and their sizes known.
  step_synced();
  step_zero();
  std::vector<size_t> bucket_bytes;
  for (const auto& b : ddp_model->reducer().last_timeline()) bucket_bytes.push_back(b.bytes);
  std::vector<std::function<void()>> modes = {
      step_plain, step_synced, step_no_sync, allreduce_all(o, *group, bucket_bytes, plain.dtype)};
  if (o.zero1) modes.push_back(step_zero);
  std::vector<std::vector<double>> rounds = time_interleaved(o, *group, modes);
  const Stats plain_t = stats_of(rounds[0]), ddp_t = stats_of(rounds[1]),
              no_sync_t = stats_of(rounds[2]), ar_t = stats_of(rounds[3]);
  // The last mode of each round is the allreduce; the trace shows the last
  // DDP step.
  auto timeline = ddp_model->reducer().last_timeline();
  Clock::time_point trace_start = bw_start_ddp, trace_end = bw_end_ddp;
  const double tail_wait = max_over_ranks(*group, stats_of(tail_waits).median, o.device);
  const double hidden_timeline =
      ar_t.median > 0 ? std::clamp(1.0 - tail_wait / ar_t.median, 0.0, 1.0) : 1.0;
  // See Note [Interleaved timing]: differences are taken within each round.
  const double exposed = std::max(0.0, paired_median(rounds[1], rounds[2]));
  const double hidden = ar_t.median > 0 ? std::clamp(1.0 - exposed / ar_t.median, 0.0, 1.0) : 1.0;
  const double overhead = paired_median(rounds[1], rounds[0]) / plain_t.median;
  if (rank0) {
    fmt::print("#\n# {:>10} {:>12} {:>12} {:>12}\n", "step", "median (s)", "min (s)", "max (s)");
    auto row = [](const char* name, const Stats& s) {
      fmt::print("  {:>10} {:>12.5f} {:>12.5f} {:>12.5f}\n", name, s.median, s.min, s.max);
    };
    row("plain", plain_t);
    row("ddp", ddp_t);
    row("no_sync", no_sync_t);
    row("allreduce", ar_t);
    fmt::print("# buckets: {}; exposed communication {:.5f} s; hidden fraction {:.3f}; DDP step "
               "vs plain {:+.1f}%\n",
               bucket_bytes.size(), exposed, hidden, 100 * overhead);
    if (o.zero1) {
      const Stats zero_t = stats_of(rounds[4]);
      row("zero1", zero_t);
      const double plain_state = double(ddp::parallel::optimizer_state_bytes(opt_ddp));
      fmt::print("# zero1: step vs ddp {:+.1f}% (paired median); optimizer state {} of plain's "
                 "{} bytes on rank 0 ({:.3f}x)\n",
                 100 * paired_median(rounds[4], rounds[1]) / ddp_t.median,
                 opt_zero->state_bytes(), plain_state,
                 double(opt_zero->state_bytes()) / plain_state);
    }
    fmt::print("# backward's wait after its last gradient (median): {:.5f} s, i.e. {:.3f} of the "
               "allreduce hidden by the timeline\n",
               tail_wait, hidden_timeline);
  }
  if (!o.trace_path.empty())
    write_trace(world.size() > 1 ? fmt::format("{}.rank{}", o.trace_path, world.rank())
                                 : o.trace_path,
                world.rank(), trace_start, trace_end, timeline);
  if (rank0 && !o.json_path.empty()) {
    // Times rounded to 6 significant digits, as the table prints them.
    ddp::io::json::Array buckets;
    for (auto b : bucket_bytes) buckets.push(b);
    ddp::io::json::Object j({.significant_digits = 6});
    j.add("model", o.model)
        .add("backend", world.group->backend_name())
        .add("world_size", world.size())
        .add("device", o.device.str())
        .add("batch_size", o.batch_size)
        .add("bucket_cap_mb", o.bucket_cap_mb)
        .add("simulated_link", link_text)
        .add("num_params", plain.num_params)
        .add("bucket_bytes", buckets)
        .add("steps", o.steps)
        .add("step_s_plain", plain_t.median)
        .add("step_s_ddp", ddp_t.median)
        .add("step_s_no_sync", no_sync_t.median)
        .add("allreduce_s", ar_t.median)
        .add("exposed_comm_s", exposed)
        .add("hidden_fraction", hidden)
        .add("ddp_overhead", overhead)
        .add("tail_wait_s", tail_wait)
        .add("hidden_fraction_timeline", hidden_timeline);
    std::ofstream(o.json_path) << j.str() << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  bench::Options o;
  try {
    o = bench::parse_options(argc, argv);
  } catch (const bench::UsageExit& e) {
    std::fputs(e.what(), e.code == 0 ? stdout : stderr);
    return e.code;
  }
  try {
    return bench::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp: %s\n", e.what());
    return 1;
  }
}
