// bench_checkpoint: how long training stalls for a checkpoint, written
// synchronously (io::save_checkpoint) and in the background
// (io::AsyncCheckpointer, Note [Asynchronous checkpoints]); issue 26.
//
//   bench_checkpoint --model resnet50 --rounds 5 --dir /tmp/ckpt
//
// The state is a ResNet's parameters and buffers plus SGD's momentum (one
// step taken), as train_resnet saves it. Each round times, on the same
// directory, one synchronous save (the whole call: the training stall), then
// one asynchronous save (the stall is the call: the snapshot; the write's
// own time is reported beside it); the background write is waited for,
// outside the timing, before the next round, so that a round's synchronous
// save never shares the disk with the previous asynchronous write. Prints
// the median and range of each and their ratio; --json writes them.

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "common/cli.h"
#include "common/hardware.h"
#include "common/models.h"
#include "common/stats.h"
#include "ddp/io/async_checkpoint.h"
#include "ddp/io/checkpoint.h"
#include "ddp/io/json.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"

namespace bench {
namespace {

struct Options {
  std::string model = "resnet50", dir = "/tmp/ddp_bench_checkpoint", json_path;
  int64_t rounds = 5, threads = 0;
};

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int run(const Options& o) {
  const int threads = set_cpu_threads(int(o.threads));
  ddp::manual_seed(1234);
  auto model = make_resnet(o.model);
  ddp::optim::SGD opt(model->parameters(), 0.1, ddp::optim::SGDOptions{.momentum = 0.9});
  ddp::Generator gen(7);
  for (ddp::Tensor& p : model->parameters()) p.set_grad(ddp::randn(p.shape(), {}, &gen));
  opt.step();  // momentum buffers exist, as in a checkpoint taken mid-training
  ddp::io::Checkpoint ckpt;
  ckpt.add("model", model).add("optimizer", opt);
  int64_t bytes = 0;
  for (const auto& s : ckpt.sections())
    for (const auto& [k, t] : s.save()) bytes += t.numel() * int64_t(ddp::element_size(t.dtype()));

  std::filesystem::remove_all(o.dir);
  std::printf("# bench_checkpoint: %s parameters, buffers and SGD momentum (%.1f MiB), cpu, %d "
              "thread(s), %lld rounds, into %s\n",
              o.model.c_str(), double(bytes) / (1 << 20), threads, (long long)o.rounds,
              o.dir.c_str());
  std::printf("# %5s %12s %14s %14s\n", "round", "sync_s", "async_stall_s", "async_write_s");
  std::vector<double> sync_s, stall_s, write_s;
  ddp::io::AsyncCheckpointer saver;
  for (int64_t r = 0; r < o.rounds; ++r) {
    auto t = std::chrono::steady_clock::now();
    ddp::io::save_checkpoint(o.dir, ckpt, {.step = 2 * r});
    sync_s.push_back(since(t));
    t = std::chrono::steady_clock::now();
    saver.save(o.dir, ckpt, {.step = 2 * r + 1});
    stall_s.push_back(since(t));
    saver.wait();
    write_s.push_back(saver.last_write_s());
    std::printf("  %5lld %12.4f %14.4f %14.4f\n", (long long)r, sync_s.back(), stall_s.back(),
                write_s.back());
    std::fflush(stdout);
  }
  const StepStats s = summarize(sync_s), a = summarize(stall_s), w = summarize(write_s);
  std::printf("# median: sync %.4f s, async stall %.4f s (%.1f %% of sync), async write %.4f s\n",
              s.median, a.median, 100 * a.median / s.median, w.median);
  if (!o.json_path.empty()) {
    ddp::io::json::Object json;
    json.add("program", "bench_checkpoint").add("model", o.model).add("threads", threads)
        .add("rounds", o.rounds).add("bytes", bytes)
        .add("sync_s", s.median).add("async_stall_s", a.median).add("async_write_s", w.median)
        .add("stall_ratio", a.median / s.median);
    std::ofstream(o.json_path) << json.str() << "\n";
  }
  std::filesystem::remove_all(o.dir);
  return 0;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  return bench::guarded_main("bench_checkpoint", [&] {
    bench::Options o;
    bench::ArgParser args("bench_checkpoint",
                          "The training stall of a checkpoint: a synchronous save against\n"
                          "AsyncCheckpointer's snapshot, on a ResNet with SGD momentum.");
    args.add_string("--model", &o.model, "the ResNet", bench::resnet_names());
    args.add_int("--rounds", &o.rounds, "rounds (one save of each kind)", 1);
    args.add_string("--dir", &o.dir, "the checkpoint directory (removed before and after)");
    args.add_int("--threads", &o.threads, "CPU threads (0: the default)", 0);
    args.add_string("--json", &o.json_path, "also write the medians to this file");
    args.parse(argc, argv);
    return bench::run(o);
  });
}
