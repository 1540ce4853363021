// bench_gpt: GPT training throughput on one device (issue 7).
//
//   bench_gpt --model gpt2_124m --batch-size 8 --seq-len 1024 --amp bf16 --json g.json
//   bench_gpt --model gpt-tiny --device cpu --batch-size 4 --seq-len 64
//
// Times `--steps` training steps (forward, cross-entropy over the vocabulary,
// backward, AdamW) after `--warmup` untimed ones on a synthetic batch of
// tokens made on the device beforehand, and reports tokens/s from the median
// step, the spread, peak memory, the FLOPs per token (llm.c's 6N + 6LCT,
// Note [Benchmark FLOPs]) and the MFU they imply. Usage, output fields and
// results: docs/benchmarks.md.

#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "common/bench_options.h"
#include "common/cli.h"
#include "common/hardware.h"
#include "common/models.h"
#include "common/report.h"
#include "ddp/core/error.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/optim/adamw.h"
#include "ddp/tensor/generator.h"

namespace bench {
namespace {

struct Options : CommonOptions {
  std::string model = "gpt2_124m";
  int64_t batch_size = 4;
  int64_t seq_len = 0;  // 0: the model's context
};

Options parse(int argc, char** argv, ddp::Device& device) {
  Options o;
  o.warmup = 3, o.steps = 10;
  ArgParser args("bench_gpt",
                 "Times GPT training steps (forward, loss, backward, AdamW) on one device,\n"
                 "on synthetic tokens; reports tokens/s, step-time spread, peak memory and MFU.");
  args.add_string("--model", &o.model, "the GPT (gpt2 = gpt2_124m)", gpt_names());
  args.add_int("--batch-size", &o.batch_size, "sequences per step (B)", 1);
  args.add_int("--seq-len", &o.seq_len,
               "tokens per sequence (T; default the context: 64 for gpt-tiny, 1024 for GPT-2)", 1);
  add_common_options(args, o, "token");
  args.parse(argc, argv);
  device = common_device(args, o);
  if (o.seq_len == 0) o.seq_len = default_seq_len(o.model);
  return o;
}

int run(const Options& o, const ddp::Device& device) {
  check_device(device);
  const int threads = device.is_cuda() ? 0 : set_cpu_threads(int(o.threads));
  const ddp::nn::models::GPTConfig c = gpt_config(o.model, o.seq_len);
  const int64_t n_params = gpt_num_params(c);
  // --dry-run builds nothing: the FLOPs need only the parameter count.
  TrainSetup setup;
  if (!o.dry_run) {
    ddp::manual_seed(1234);
    auto model = std::make_shared<ddp::nn::models::GPT>(c);
    if (model->num_parameters() != n_params)
      throw ddp::Error(fmt::format("the model has {} parameters but gpt_num_params counts {}",
                                   model->num_parameters(), n_params));
    model->to(device);
    setup.model = model;
    const int64_t vocab = c.vocab_size;
    setup.loss = [vocab](const ddp::Tensor& out, const ddp::Tensor& y) {
      return ddp::nn::functional::cross_entropy(out.reshape({-1, vocab}), y.reshape({-1}));
    };
    setup.optimizer = std::make_shared<ddp::optim::AdamW>(
        model->parameters(), 3e-4, ddp::optim::AdamWOptions{.weight_decay = 0.1});
    setup.batch = synthetic_tokens(o.batch_size, o.seq_len, vocab, device, 99);
    setup.device = device;
    setup.amp = o.amp;
  }

  BenchInfo info;
  info.program = "bench_gpt";
  info.model = o.model;
  info.device = device;
  info.threads = threads;
  info.amp = o.amp;
  info.batch_size = o.batch_size;
  info.warmup = o.warmup;
  info.steps = o.steps;
  info.num_params = n_params;
  info.unit = "token";
  info.samples_per_step = o.batch_size * o.seq_len;
  info.flops_per_sample = gpt_train_flops_per_token(n_params, c, o.seq_len);
  info.flops_how = fmt::format(
      "llm.c's 6N + 6LCT: N = {} parameters, all of them, the tied token embedding and the "
      "position embedding included; L = {}, C = {}, T = {}",
      n_params, c.n_layer, c.n_embd, o.seq_len);
  info.step_how =
      "forward + cross-entropy + backward + AdamW (lr 3e-4, weight decay 0.1; multi-tensor)";
  info.model_lines.push_back(fmt::format("{} layers, {} heads, width {}, vocab {}, context {}; "
                                         "B = {}, T = {}",
                                         c.n_layer, c.n_head, c.n_embd, c.vocab_size,
                                         c.block_size, o.batch_size, o.seq_len));
  info.model_json.add("seq_len", o.seq_len);
  info.peak_tflops = o.peak_tflops;
  info.json_path = o.json_path;
  info.dry_run = o.dry_run;
  return run_and_report(info, setup);
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  return bench::guarded_main("bench_gpt", [&] {
    ddp::Device device;
    const bench::Options o = bench::parse(argc, argv, device);
    return bench::run(o, device);
  });
}
