// scaling_main: one rank of the shaped-network scaling benchmark
// (benchmarks/scaling/run.sh starts one per network namespace).
//
//   RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.232.1.1 MASTER_PORT=29700
//       scaling_main --mode ddp --model resnet18 --image-size 32 --batch-size 32 --json r.json
//
// Trains the model on a fixed synthetic batch (forward, loss, backward, SGD
// step) for --warmup untimed and --steps timed steps, and rank 0 writes the
// throughput of the whole group (images per second, the slowest rank's
// clock). Modes:
//   ddp           DistributedDataParallel, --bucket-cap-mb buckets
//   no_comm       the same under no_sync(): DDP's bookkeeping, no communication
//   auto_buckets  DDPOptions::auto_bucket_size (tuned during the warm-up)
//   zero1         ZeroRedundancyOptimizer over SGD (docs/zero.md): buckets
//                 reduce-scattered, the shard stepped, parameters all-gathered
//   zero1_overlap the same with ZeroOptions::overlap_with_forward: the
//                 all-gathers issued first layers first and waited per
//                 layer in the next forward; broadcast_buffers off
//   powersgd      the PowerSGD hook, rank 4, compressing from the 3rd step
//                 (docs/powersgd.md); --warmup covers the plain steps
//   bf16, fp16    DDP with bf16_compress_hook / fp16_compress_hook
//                 (comm_hooks.h): each bucket divided by the world size,
//                 cast, allreduced, cast back (on gloo and mpi the half
//                 type travels as f32: Note [Half precision on the wire])
//   overlap       DistributedDataParallel::overlap_step (docs/ddp.md): the
//                 step applied per bucket in the next forward, the last
//                 --priority-buckets buckets launched first layers first;
//                 --overlap-chunk-mb C sends each bucket as allreduces of
//                 at most C MiB, of which --overlap-issue-ratio R of the
//                 bytes ready go out during backward and the rest at its
//                 end, first layers first (Note [Overlap chunks]);
//                 broadcast_buffers off (the broadcast would wait behind
//                 the buckets in flight)
//
// --compute emulated --profile FILE (the GPU-regime twin): the model is the
// profile's chain of EmulatedLayers (emulated_layer.h), whose forward and
// backward sleep the profile's seconds × --stretch while real gradients of
// the real sizes go through DDP; the optimizer step is a sleep of the
// profile's optimizer_s × stretch too (on a GPU node it runs on the GPU).
// Modes ddp, no_comm, auto_buckets, bf16, fp16 and overlap (whose optimizer is a
// SleepingOptimizer: the same sleep, a bucket's share at a time); times
// and throughput are reported
// in the emulated cluster's time (wall ÷ stretch). bf16's and fp16's casts stay real
// CPU work (on a GPU node a cast of the bucket, ~0.2 ms for GPT-2's 498 MB).
// --trace FILE (emulated): rank 0 writes the last timed step as a Chrome
// trace (chrome://tracing, ui.perfetto.dev) in cluster microseconds (wall ÷
// stretch): forward, backward and optimizer on one row, each bucket's
// "ready" instant and its communication (hook called → work completed,
// Reducer::last_timeline()) on another.
// Usage and results: docs/benchmarks.md, "Scaling on a shaped network".

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/cli.h"
#include "common/models.h"
#include "emulated_layer.h"
#include "ddp/dist/init.h"
#include "ddp/io/json.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/comm_hooks.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/powersgd.h"
#include "ddp/parallel/zero.h"
#include "ddp/tensor/generator.h"

namespace bench {
namespace {

struct ScalingOptions {
  std::string mode = "ddp";
  std::string model = "resnet18";
  int64_t image_size = 32, batch_size = 32, steps = 10, warmup = 3, auto_iterations = 3;
  double bucket_cap_mb = 25.0;
  int64_t priority_buckets = 4;
  double overlap_chunk_mb = 0.0, overlap_issue_ratio = 1.0;  // Note [Overlap chunks]
  std::string json_path, trace_path;
  std::string compute = "real", profile;
  double stretch = 1.0, cluster_link_gbit = 0.0, link_gbit = 0.0;  // 0: not given
};

using Clock = std::chrono::steady_clock;

double max_over_ranks(ddp::dist::ProcessGroup& g, double v) {
  ddp::Tensor t = ddp::Tensor::full({1}, v, ddp::DType::f64);
  g.allreduce({t}, ddp::dist::ReduceOp::max)->wait(g.timeout());
  return t.item<double>();
}

// Each element's maximum over the ranks: for per-step times, the slowest
// rank's time of each step.
std::vector<double> max_over_ranks(ddp::dist::ProcessGroup& g, const std::vector<double>& v) {
  ddp::Tensor t = ddp::Tensor::from_vector(v, {int64_t(v.size())}, ddp::DType::f64);
  g.allreduce({t}, ddp::dist::ReduceOp::max)->wait(g.timeout());
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = t.data<double>()[i];
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Timing {
  double seconds = 0;          // the timed steps, the slowest rank's clock
  std::vector<double> step_s;  // per step, the slowest rank's
};

Timing time_steps(ddp::dist::ProcessGroup& group, int64_t warmup, int64_t steps,
                  const std::function<void()>& step) {
  for (int64_t i = 0; i < warmup; ++i) step();
  group.barrier()->wait(group.timeout());
  std::vector<double> each;
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    step();
    each.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  Timing t;
  t.seconds = max_over_ranks(group, std::chrono::duration<double>(Clock::now() - start).count());
  t.step_s = max_over_ranks(group, each);
  return t;
}

// The keys every row has (docs/benchmarks.md): what ran, and on which link.
void add_common(ddp::io::json::Object& j, const ScalingOptions& o, int world_size,
                const std::string& profile) {
  j.add("nodes", world_size).add("engine", "libddp").add("mode", o.mode)
      .add("compute", o.compute).add("profile", profile).add("stretch", o.stretch);
  if (o.cluster_link_gbit > 0) j.add("cluster_link_gbit", o.cluster_link_gbit);
  if (o.link_gbit > 0) j.add("link_gbit", o.link_gbit);
}

// The overlap mode's optimizer in the twin: stepping parameters takes their
// share of the profile's optimizer time, sleeping (on a GPU node the step
// runs on the GPU); nothing is updated, so the gradient check still holds.
class SleepingOptimizer final : public ddp::optim::Optimizer {
 public:
  SleepingOptimizer(const ddp::Tensors& params, std::chrono::nanoseconds whole)
      : Optimizer("SleepingOptimizer", ddp::optim::single_group(params), 0.0, 0.0),
        whole_(whole) {
    for (const ddp::Tensor& p : params) total_ += p.numel();
  }

 protected:
  void update_group(const ddp::optim::ParamGroup&, const ddp::Tensors& params,
                    const ddp::Tensors&, const std::vector<ddp::TensorDict*>&) override {
    int64_t n = 0;
    for (const ddp::Tensor& p : params) n += p.numel();
    std::this_thread::sleep_for(
        std::chrono::nanoseconds(int64_t(double(whole_.count()) * double(n) / double(total_))));
  }
  ddp::TensorDict options_state() const override { return {}; }
  void load_options(const ddp::TensorDict&) override {}
  std::vector<std::string> state_names() const override { return {}; }

 private:
  std::chrono::nanoseconds whole_;
  int64_t total_ = 0;
};

// --trace: one step's phases and bucket communication as Chrome trace JSON,
// in cluster microseconds since the step's start (wall ÷ stretch).
struct StepMarks {
  Clock::time_point start, forward_end, backward_end, end;
};

void write_trace(const std::string& path, int rank, double stretch, const std::string& mode,
                 const StepMarks& m, const std::vector<ddp::parallel::BucketTiming>& timeline) {
  auto us = [&](Clock::time_point t) {
    return std::round(std::chrono::duration<double, std::micro>(t - m.start).count() / stretch *
                      10) / 10;
  };
  using ddp::io::json::Object;
  ddp::io::json::Array events;
  auto span = [&](const std::string& name, int tid, Clock::time_point a, Clock::time_point b) {
    events.push(Object().add("name", name).add("ph", "X").add("pid", rank).add("tid", tid)
                    .add("ts", us(a)).add("dur", std::max(0.0, us(b) - us(a))));
  };
  span("forward", 0, m.start, m.forward_end);
  span("backward", 0, m.forward_end, m.backward_end);
  span(mode == "overlap" ? "optimizer (applied per bucket in the next forward)"
                         : "wait for buckets + optimizer",
       0, m.backward_end, m.end);
  for (const auto& b : timeline) {
    if (b.launched.time_since_epoch().count() == 0) continue;  // not this step's
    events.push(Object().add("name", fmt::format("bucket {} ready", b.index)).add("ph", "i")
                    .add("s", "t").add("pid", rank).add("tid", 0).add("ts", us(b.ready)));
    span(fmt::format("allreduce bucket {} ({:.2f} MiB)", b.index, double(b.bytes) / (1 << 20)), 1,
         b.launched, b.done);
  }
  const char* threads[] = {"compute (emulated waits)", "communication (hook called → done)"};
  for (int tid = 0; tid < 2; ++tid)
    events.push(Object().add("name", "thread_name").add("ph", "M").add("pid", rank)
                    .add("tid", tid).add("args", Object().add("name", threads[tid])));
  std::ofstream(path) << Object().add("traceEvents", events).pretty(1) << "\n";
}

int run_emulated(const ScalingOptions& o) {
  if (o.mode == "zero1" || o.mode == "zero1_overlap" || o.mode == "powersgd")
    throw UsageExit(fmt::format("scaling_main: --mode {} is not available with --compute "
                                "emulated (its optimizer or hook would compute on the CPU)\n",
                                o.mode),
                    2, "--mode");
  if (o.profile.empty())
    throw UsageExit("scaling_main: --compute emulated needs --profile FILE\n", 2, "--profile");
  Profile profile;
  try {
    profile = load_profile(o.profile);
  } catch (const ddp::ValueError& e) {
    throw UsageExit(fmt::format("scaling_main: --profile: {}\n", e.what()), 2, "--profile");
  }
  ddp::dist::World world = ddp::dist::init_process_group();
  auto& group = *world.group;
  auto model = std::make_shared<EmulatedModel>(profile, o.stretch, world.rank());
  ddp::parallel::DDPOptions dopts;
  dopts.bucket_cap_mb = o.bucket_cap_mb;
  dopts.auto_bucket_size = o.mode == "auto_buckets";
  dopts.auto_bucket_iterations = int(o.auto_iterations);
  const bool overlap = o.mode == "overlap";
  dopts.broadcast_buffers = !overlap;
  ddp::parallel::DistributedDataParallel<ddp::nn::UnaryModule> ddp_model(model, world.group,
                                                                         dopts);
  const ddp::Tensor x = EmulatedModel::input();
  const bool sync = o.mode != "no_comm";
  const auto optimizer = std::chrono::nanoseconds(int64_t(profile.optimizer_s * o.stretch * 1e9));
  SleepingOptimizer sleeping(model->parameters(), optimizer);
  if (overlap)
    ddp_model.overlap_step(sleeping, int(o.priority_buckets),
                           {.chunk_mb = o.overlap_chunk_mb, .issue_ratio = o.overlap_issue_ratio});
  if (o.mode == "bf16") ddp_model.register_comm_hook(ddp::parallel::bf16_compress_hook);
  if (o.mode == "fp16") ddp_model.register_comm_hook(ddp::parallel::fp16_compress_hook);
  StepMarks marks;  // the last step's, for --trace
  auto step = [&] {
    marks.start = Clock::now();
    if (overlap) {
      // The step and the zeroing are applied per bucket in the next forward.
      ddp::Tensor y = ddp_model(x);
      marks.forward_end = Clock::now();
      y.backward();
      marks.backward_end = Clock::now();
      sleeping.step();
      sleeping.zero_grad(/*set_to_none=*/false);
      marks.end = Clock::now();
      return;
    }
    auto run_step = [&] {
      // In place, as libddp recommends with gradient_as_bucket_view (and as
      // torch 1.13's optimizer does): no fresh .grad, so no page faults.
      model->zero_grad(/*set_to_none=*/false);
      ddp::Tensor y = ddp_model(x);
      marks.forward_end = Clock::now();
      y.backward();
      marks.backward_end = Clock::now();
      std::this_thread::sleep_for(optimizer);  // the optimizer step, on the GPU
      marks.end = Clock::now();
    };
    if (sync) {
      run_step();
    } else {
      auto guard = ddp_model.no_sync();
      run_step();
    }
  };
  const int64_t warmup =
      dopts.auto_bucket_size ? std::max(o.warmup, o.auto_iterations + 2) : o.warmup;
  const Timing t = time_steps(group, warmup, o.steps, step);
  if (!o.trace_path.empty() && world.rank() == 0)
    write_trace(o.trace_path, 0, o.stretch, o.mode, marks, ddp_model.reducer().last_timeline());
  if (overlap) {
    // One more backward, whose buckets are finished without a step: the
    // gradients of Note [Emulated gradients] are then there to check.
    ddp_model(x).backward();
    ddp_model.synchronize_step();
  }
  // Note [Emulated gradients]: the last step's gradients prove the reduction.
  const int n = world.size();
  const double per_use = sync ? double(n + 1) / 2048.0
                              : double(EmulatedModel::grad_value(world.rank()));
  std::string first_bad;
  const int64_t bad = model->check_gradients(per_use, &first_bad);
  const double bad_all = max_over_ranks(group, double(bad));
  const double cluster_s = t.seconds / o.stretch;
  const double rate = double(profile.samples_per_step * o.steps * n) / cluster_s;
  const double step_s = median(t.step_s) / o.stretch;
  const size_t buckets = ddp_model.reducer().num_buckets();
  if (world.rank() == 0) {
    fmt::print("scaling_main: {} ranks, emulated {} (stretch {:g}), mode {}, {} buckets: "
               "{:.4f} s/step cluster time ({:.4f} s wall), {:.1f} {}/s; gradients {}\n",
               n, profile.name, o.stretch, o.mode, buckets, step_s, step_s * o.stretch, rate,
               profile.sample, bad_all == 0 ? "ok" : "WRONG (" + first_bad + ")");
    if (!o.json_path.empty()) {
      ddp::io::json::Object j({.significant_digits = 6});
      add_common(j, o, n, profile.name);
      j.add("sample", profile.sample).add("samples_per_step", profile.samples_per_step)
          .add("profile_step_s", profile.step_s).add("bucket_cap_mb", o.bucket_cap_mb)
          .add("broadcast_buffers", dopts.broadcast_buffers)
          .add("priority_buckets", overlap ? o.priority_buckets : int64_t(0))
          .add("overlap_chunk_mb", overlap ? o.overlap_chunk_mb : 0.0)
          .add("overlap_issue_ratio", overlap ? o.overlap_issue_ratio : 1.0)
          .add("buckets", int64_t(buckets)).add("steps", o.steps)
          .add("step_s", cluster_s / double(o.steps)).add("median_step_s", step_s)
          .add("wall_step_s", step_s * o.stretch)
          .add("images_per_s", rate).add("grad_elements", model->num_parameters())
          .add("grad_check", bad_all == 0 ? "ok" : "wrong");
      if (const auto* tuner = ddp_model.bucket_tuner(); tuner && tuner->done())
        j.add("predicted_exposed_s", tuner->plan().predicted_exposed_s / o.stretch)
            .add("alpha_s", tuner->link().alpha_s)
            .add("beta_s_per_byte", tuner->link().beta_s_per_byte);
      std::ofstream(o.json_path) << j.str() << "\n";
    }
  }
  if (bad_all != 0) {
    fmt::print(stderr, "scaling_main: rank {}: {} parameters with a wrong gradient, first {}\n",
               world.rank(), bad, first_bad.empty() ? "on another rank" : first_bad);
    return 1;
  }
  return 0;
}

int run(const ScalingOptions& o) {
  if (o.compute == "emulated") return run_emulated(o);
  ddp::dist::World world = ddp::dist::init_process_group();
  auto& group = *world.group;
  ddp::manual_seed(1234);
  auto model = make_resnet(o.model);
  ddp::parallel::DDPOptions dopts;
  dopts.bucket_cap_mb = o.bucket_cap_mb;
  dopts.auto_bucket_size = o.mode == "auto_buckets";
  dopts.auto_bucket_iterations = int(o.auto_iterations);
  const bool zero1_overlap = o.mode == "zero1_overlap";
  const bool zero1 = o.mode == "zero1" || zero1_overlap;
  if (zero1) dopts.rebuild_buckets = false;  // the shards follow the buckets (docs/zero.md)
  const bool overlap = o.mode == "overlap";
  // It would wait behind the buckets (or all-gathers) in flight.
  dopts.broadcast_buffers = !overlap && !zero1_overlap;
  ddp::parallel::DistributedDataParallel<ddp::nn::UnaryModule> ddp_model(model, world.group,
                                                                         dopts);
  const ddp::optim::SGDOptions sgd{.momentum = 0.9};
  std::unique_ptr<ddp::optim::Optimizer> opt;
  if (zero1)
    opt = std::make_unique<ddp::parallel::ZeroRedundancyOptimizer>(
        ddp_model, ddp::parallel::zero_sgd(0.01, sgd),
        ddp::parallel::ZeroOptions{.overlap_with_forward = zero1_overlap});
  else
    opt = std::make_unique<ddp::optim::SGD>(model->parameters(), 0.01, sgd);
  if (overlap)
    ddp_model.overlap_step(*opt, int(o.priority_buckets),
                           {.chunk_mb = o.overlap_chunk_mb, .issue_ratio = o.overlap_issue_ratio});
  int64_t plain_steps = 0;  // steps before the comm hook compresses
  if (o.mode == "bf16") ddp_model.register_comm_hook(ddp::parallel::bf16_compress_hook);
  if (o.mode == "fp16") ddp_model.register_comm_hook(ddp::parallel::fp16_compress_hook);
  if (o.mode == "powersgd") {
    ddp::parallel::PowerSGDOptions p;
    p.matrix_approximation_rank = 4;
    p.start_powerSGD_iter = 2;  // the smallest PowerSGD allows with error feedback
    plain_steps = p.start_powerSGD_iter;
    ddp_model.register_comm_hook(ddp::parallel::powersgd_hook(p));
  }
  Batch batch = synthetic_images(o.batch_size, o.image_size, num_classes(o.model),
                                 ddp::Device::cpu(), 99 + uint64_t(world.rank()));
  const bool sync = o.mode != "no_comm";
  auto step = [&] {
    auto run_step = [&] {
      ddp::nn::functional::cross_entropy(ddp_model(batch.x), batch.y).backward();
      opt->step();
      opt->zero_grad();
    };
    if (sync) {
      run_step();
    } else {
      auto guard = ddp_model.no_sync();
      run_step();
    }
  };
  // auto_buckets tunes during the warm-up: one warm-up backward, the
  // measured ones, and the forward that rebuilds; powersgd's plain steps
  // are warm-up too, so the timed ones all compress.
  int64_t warmup = dopts.auto_bucket_size ? std::max(o.warmup, o.auto_iterations + 2) : o.warmup;
  warmup = std::max(warmup, plain_steps + 1);
  const Timing t = time_steps(group, warmup, o.steps, step);
  const double seconds = t.seconds;
  const double images_per_s = double(o.batch_size * o.steps * world.size()) / seconds;
  size_t buckets = ddp_model.reducer().num_buckets();
  if (world.rank() == 0) {
    fmt::print("scaling_main: {} ranks, mode {}, {} {}x{} batch {}/rank, {} buckets: {:.4f} s/step, "
               "{:.1f} images/s\n",
               world.size(), o.mode, o.model, o.image_size, o.image_size, o.batch_size, buckets,
               seconds / double(o.steps), images_per_s);
    if (!o.json_path.empty()) {
      ddp::io::json::Object j({.significant_digits = 6});
      add_common(j, o, world.size(), o.model);
      j.add("model", o.model).add("batch_size", o.batch_size).add("image_size", o.image_size)
          .add("bucket_cap_mb", o.bucket_cap_mb).add("buckets", int64_t(buckets))
          .add("steps", o.steps).add("step_s", seconds / double(o.steps))
          .add("median_step_s", median(t.step_s)).add("images_per_s", images_per_s)
          .add("grad_elements", model->num_parameters());
      if (const auto* tuner = ddp_model.bucket_tuner(); tuner && tuner->done())
        j.add("predicted_exposed_s", tuner->plan().predicted_exposed_s)
            .add("alpha_s", tuner->link().alpha_s)
            .add("beta_s_per_byte", tuner->link().beta_s_per_byte);
      std::ofstream(o.json_path) << j.str() << "\n";
    }
  }
  return 0;
}

int parse_and_run(int argc, char** argv) {
  ScalingOptions o;
  ArgParser args("scaling_main",
                 "One rank of the shaped-network scaling benchmark (benchmarks/scaling/run.sh).");
  args.add_string("--mode", &o.mode,
                  "ddp | no_comm | auto_buckets | zero1 | zero1_overlap | powersgd | bf16 | fp16 | "
                  "overlap",
                  {"ddp", "no_comm", "auto_buckets", "zero1", "zero1_overlap", "powersgd", "bf16",
                   "fp16", "overlap"});
  args.add_int("--priority-buckets", &o.priority_buckets,
               "overlap: the last buckets of backward, launched first layers first at its end "
               "(default 4)",
               1);
  args.add_double("--overlap-chunk-mb", &o.overlap_chunk_mb,
                  "overlap: each bucket sent as allreduces of at most C MiB, the first layers' "
                  "overtaking those not yet issued (default 0: whole buckets)",
                  0.0);
  args.add_double("--overlap-issue-ratio", &o.overlap_issue_ratio,
                  "overlap with chunks: the share of the bytes ready issued during backward, in "
                  "(0, 1]; the rest goes at its end, first layers first (default 1)",
                  0.0, /*exclusive=*/true);
  args.add_string("--model", &o.model, "a ResNet of the benchmark zoo (default resnet18)",
                  resnet_names());
  args.add_int("--image-size", &o.image_size, "input side (default 32)", 8);
  args.add_int("--batch-size", &o.batch_size, "images per rank (default 32)", 1);
  args.add_int("--steps", &o.steps, "timed steps (default 10)", 1);
  args.add_int("--warmup", &o.warmup, "untimed steps first (default 3)", 0);
  args.add_int("--auto-iterations", &o.auto_iterations,
               "auto_buckets: measured backward passes before tuning (default 3)", 1);
  args.add_double("--bucket-cap-mb", &o.bucket_cap_mb, "bucket size in MiB (default 25)", 0.0,
                  /*exclusive=*/true);
  args.add_string("--json", &o.json_path, "write rank 0's figures as one JSON object");
  args.add_string("--trace", &o.trace_path,
                  "--compute emulated: rank 0 writes the last timed step as a Chrome trace (JSON, "
                  "cluster microseconds)");
  args.add_string("--compute", &o.compute,
                  "real (the model computes) | emulated (the profile's times; default real)",
                  {"real", "emulated"});
  args.add_string("--profile", &o.profile, "--compute emulated: the compute profile (JSON)");
  args.add_double("--stretch", &o.stretch,
                  "--compute emulated: every wait x S (the shaped link runs at cluster / S)", 0.0,
                  /*exclusive=*/true);
  args.add_double("--cluster-link-gbit", &o.cluster_link_gbit,
                  "the emulated cluster's link, recorded in the JSON row", 0.0,
                  /*exclusive=*/true);
  args.add_double("--link-gbit", &o.link_gbit, "the shaped link's rate, recorded in the JSON row",
                  0.0, /*exclusive=*/true);
  args.parse(argc, argv);
  if (o.overlap_issue_ratio > 1)
    args.fail(fmt::format("--overlap-issue-ratio: must be in (0, 1], got {}", o.overlap_issue_ratio));
  if (!o.trace_path.empty() && o.compute != "emulated")
    args.fail("--trace: needs --compute emulated");
  return run(o);
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  return bench::guarded_main("scaling_main", [&] { return bench::parse_and_run(argc, argv); });
}
