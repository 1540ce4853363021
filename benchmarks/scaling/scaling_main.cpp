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
//   powersgd      the PowerSGD hook, rank 4, compressing from the 3rd step
//                 (docs/powersgd.md); --warmup covers the plain steps
// Usage and results: docs/benchmarks.md, "Scaling on a shaped network".

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>

#include "common/cli.h"
#include "common/models.h"
#include "ddp/dist/init.h"
#include "ddp/io/json.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/optim/sgd.h"
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
  std::string json_path;
};

using Clock = std::chrono::steady_clock;

double max_over_ranks(ddp::dist::ProcessGroup& g, double v) {
  ddp::Tensor t = ddp::Tensor::full({1}, v, ddp::DType::f64);
  g.allreduce({t}, ddp::dist::ReduceOp::max)->wait(g.timeout());
  return t.item<double>();
}

int run(const ScalingOptions& o) {
  ddp::dist::World world = ddp::dist::init_process_group();
  auto& group = *world.group;
  ddp::manual_seed(1234);
  auto model = make_resnet(o.model);
  ddp::parallel::DDPOptions dopts;
  dopts.bucket_cap_mb = o.bucket_cap_mb;
  dopts.auto_bucket_size = o.mode == "auto_buckets";
  dopts.auto_bucket_iterations = int(o.auto_iterations);
  const bool zero1 = o.mode == "zero1";
  if (zero1) dopts.rebuild_buckets = false;  // the shards follow the buckets (docs/zero.md)
  ddp::parallel::DistributedDataParallel<ddp::nn::UnaryModule> ddp_model(model, world.group,
                                                                         dopts);
  const ddp::optim::SGDOptions sgd{.momentum = 0.9};
  std::unique_ptr<ddp::optim::Optimizer> opt;
  if (zero1)
    opt = std::make_unique<ddp::parallel::ZeroRedundancyOptimizer>(
        ddp_model, ddp::parallel::zero_sgd(0.01, sgd));
  else
    opt = std::make_unique<ddp::optim::SGD>(model->parameters(), 0.01, sgd);
  int64_t plain_steps = 0;  // steps before the comm hook compresses
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
  for (int64_t i = 0; i < warmup; ++i) step();
  group.barrier()->wait(group.timeout());
  const auto start = Clock::now();
  for (int64_t i = 0; i < o.steps; ++i) step();
  const double seconds =
      max_over_ranks(group, std::chrono::duration<double>(Clock::now() - start).count());
  const double images_per_s = double(o.batch_size * o.steps * world.size()) / seconds;
  size_t buckets = ddp_model.reducer().num_buckets();
  if (world.rank() == 0) {
    fmt::print("scaling_main: {} ranks, mode {}, {} {}x{} batch {}/rank, {} buckets: {:.4f} s/step, "
               "{:.1f} images/s\n",
               world.size(), o.mode, o.model, o.image_size, o.image_size, o.batch_size, buckets,
               seconds / double(o.steps), images_per_s);
    if (!o.json_path.empty()) {
      ddp::io::json::Object j({.significant_digits = 6});
      j.add("nodes", world.size()).add("engine", "libddp").add("mode", o.mode)
          .add("model", o.model).add("batch_size", o.batch_size).add("image_size", o.image_size)
          .add("bucket_cap_mb", o.bucket_cap_mb).add("buckets", int64_t(buckets))
          .add("steps", o.steps).add("step_s", seconds / double(o.steps))
          .add("images_per_s", images_per_s);
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
  args.add_string("--mode", &o.mode, "ddp | no_comm | auto_buckets | zero1 | powersgd",
                  {"ddp", "no_comm", "auto_buckets", "zero1", "powersgd"});
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
  args.parse(argc, argv);
  return run(o);
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  return bench::guarded_main("scaling_main", [&] { return bench::parse_and_run(argc, argv); });
}
