#include "train_gpt/options.h"

#include "common/cli.h"

#include <cmath>
#include <cstdlib>

namespace train_gpt {

Options parse_options(int argc, char** argv) {
  Options o;
  examples::Cli cli("train_gpt",
                    "Trains a GPT byte-level language model with DistributedDataParallel.\n"
                    "Launch with mpirun, srun, ddprun or torchrun --no-python.");
  cli.add_string("--model", &o.model,
                 "configuration (custom: give --n-layer --n-head --n-embd --block-size)",
                 {"gpt-tiny", "gpt-mini", "gpt2-124m", "custom"});
  cli.add_int("--n-layer", &o.n_layer, "transformer blocks (0: the model's)", 0);
  cli.add_int("--n-head", &o.n_head, "attention heads (0: the model's)", 0);
  cli.add_int("--n-embd", &o.n_embd, "embedding width (0: the model's)", 0);
  cli.add_int("--block-size", &o.block_size, "context length T (0: the model's)", 0);
  cli.add_double("--dropout", &o.dropout, "dropout probability", 0);
  cli.add_string("--data", &o.data, "corpus", {"text", "synthetic"});
  cli.add_string("--data-dir", &o.data_dir, "a text file or a folder of them");
  cli.add_int("--stride", &o.stride, "tokens between training windows", 1);
  cli.add_int("--steps", &o.steps, "optimizer steps of the run; sets the lr schedule", 1);
  cli.add_int("--max-steps", &o.max_steps,
              "stop after this many steps in total (-1: no limit; 0: train none, e.g. to "
              "--sample from a --resume checkpoint; the schedule keeps --steps)",
              -1);
  cli.add_int("--batch-size", &o.batch_size,
              "GLOBAL sequences per optimizer step (per rank per micro-batch: "
              "batch / (world size x grad-accum))",
              1);
  cli.add_int("--grad-accum", &o.grad_accum, "micro-batches per step, all but the last under no_sync", 1);
  cli.add_double("--lr", &o.lr, "peak learning rate", 0);
  cli.add_double("--min-lr", &o.min_lr, "lr at the end of the cosine (-1: lr / 10)", -1);
  cli.add_double("--weight-decay", &o.weight_decay, "AdamW decoupled decay on matrices only", 0);
  cli.add_double("--beta1", &o.beta1, "AdamW beta1", 0);
  cli.add_double("--beta2", &o.beta2, "AdamW beta2", 0);
  cli.add_int("--warmup-steps", &o.warmup_steps, "linear warmup steps (-1: 10% of the run)", -1);
  cli.add_double("--grad-clip", &o.grad_clip, "clip the gradient norm to this (0: off)", 0);
  cli.add_string("--amp", &o.amp, "mixed precision (f16 adds a GradScaler)", {"off", "bf16", "f16"});
  cli.add_double("--bucket-cap-mb", &o.bucket_cap_mb, "DDP gradient bucket size in MiB", 0);
  cli.add_string("--comm-hook", &o.comm_hook, "how DDP reduces gradient buckets (docs/powersgd.md)",
                 {"allreduce", "fp16", "bf16", "powersgd"});
  cli.add_int("--powersgd-rank", &o.powersgd_rank, "PowerSGD matrix approximation rank", 1);
  cli.add_int("--powersgd-start-iter", &o.powersgd_start_iter,
              "steps of plain allreduce before PowerSGD compresses", 2);
  cli.add_string("--backend", &o.backend, "process group backend (default: nccl on GPUs, "
                 "mpi under mpirun, else gloo)", {"", "nccl", "gloo", "mpi"});
  cli.add_string("--checkpoint-dir", &o.checkpoint_dir, "save a checkpoint here at the end");
  cli.add_int("--checkpoint-every", &o.checkpoint_every, "also save every N steps (0: only at the end)", 0);
  cli.add_flag("--async-checkpoint", &o.async_checkpoint,
               "write checkpoints in the background: a step waits only for a copy of the state in "
               "memory (docs/checkpoints.md)");
  cli.add_flag("--resume", &o.resume, "continue from the checkpoint in --checkpoint-dir if there is one");
  cli.add_flag("--fault-tolerant", &o.fault_tolerant,
               "keep training when a rank dies: DDP on an ElasticGroup (gloo, CPU; under ddprun "
               "--nproc-per-node MIN:MAX a dead worker is replaced; docs/fault_tolerance.md)");
  cli.add_flag("--check-replicas", &o.check_replicas,
               "--fault-tolerant: after each membership change, compare every replica's state hash");
  cli.add_string("--metrics", &o.metrics,
                 "write one JSON line per logged step to this file (--fault-tolerant: per "
                 "committed step)");
  cli.add_int("--metrics-port", &o.metrics_port,
              "serve Prometheus metrics at /metrics on PORT + local rank (0: off)", 0);
  cli.add_string("--job-name", &o.job_name, "the job label of the metrics (default: train_gpt)");
  cli.add_string("--tensorboard", &o.tensorboard, "write TensorBoard scalars (rank 0) to this folder");
  cli.add_int("--straggler-every", &o.straggler_every,
              "steps between straggler checks, one tiny allgather each (0: off; docs/ddp.md)", 0);
  cli.add_int("--log-every", &o.log_every, "steps between progress lines and metrics lines", 1);
  cli.add_int("--eval-every", &o.eval_every, "steps between validation passes (0: only at the end)", 0);
  cli.add_int("--val-batches", &o.val_batches, "validation batches per rank (0: the whole split)", 0);
  cli.add_flag("--print-params", &o.print_params, "print every parameter's name and shape");
  cli.add_int("--seed", &o.seed, "seed of the initial weights and the shuffling", 0);
  cli.add_int("--workers", &o.workers, "data loader threads per rank", 0);
  cli.add_string("--init-from-hf", &o.init_from_hf,
                 "start from a Hugging Face GPT-2 model.safetensors (give the matching --model "
                 "or sizes; see docs/models.md)");
  cli.add_int("--sample", &o.sample, "after training, print N bytes generated from --prompt", 0);
  cli.add_string("--prompt", &o.prompt, "text the sample continues (default a newline)");
  cli.add_value("--temperature", "X", "sampling temperature, > 0 (lower: more likely bytes)", "1",
                [&](const std::string& v) {
                  char* end = nullptr;
                  const double x = std::strtod(v.c_str(), &end);
                  if (v.empty() || *end != '\0' || !std::isfinite(x))
                    return "'" + v + "' is not a finite number";
                  if (!(x > 0)) return "'" + v + "' must be greater than 0";
                  o.temperature = x;
                  return std::string();
                });
  cli.add_int("--top-k", &o.top_k, "sample among the K most likely bytes (default: all)", 1);
  cli.parse(argc, argv);
  if (o.metrics_port > 65535) cli.fail("--metrics-port: " + std::to_string(o.metrics_port) + " is above 65535");
  if (cli.given("--job-name") && o.metrics_port == 0) cli.fail("--job-name: needs --metrics-port");
  if (o.model == "custom" && (o.n_layer == 0 || o.n_head == 0 || o.n_embd == 0 || o.block_size == 0))
    cli.fail("--model custom: needs --n-layer, --n-head, --n-embd and --block-size");
  if (o.check_replicas && !o.fault_tolerant) cli.fail("--check-replicas: needs --fault-tolerant");
  if (o.fault_tolerant) {
    // Note [Fault-tolerant GPT trainer] (fault_tolerant.cpp): what that loop
    // does not have. Checked first, so that the message names the flag the
    // fault-tolerant loop lacks rather than what that flag would need.
    for (const char* flag : {"--amp", "--resume", "--checkpoint-dir", "--checkpoint-every",
                             "--async-checkpoint", "--eval-every", "--metrics-port",
                             "--tensorboard", "--straggler-every", "--comm-hook"})
      if (cli.given(flag)) cli.fail(std::string("--fault-tolerant: takes no ") + flag);
    if (!o.backend.empty() && o.backend != "gloo") cli.fail("--fault-tolerant: runs on gloo only");
  }
  if (o.comm_hook != "powersgd" && (cli.given("--powersgd-rank") || cli.given("--powersgd-start-iter")))
    cli.fail("--powersgd-rank, --powersgd-start-iter: need --comm-hook powersgd");
  if (o.resume && o.checkpoint_dir.empty()) cli.fail("--resume: needs --checkpoint-dir");
  if (o.async_checkpoint && o.checkpoint_dir.empty()) cli.fail("--async-checkpoint: needs --checkpoint-dir");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty())
    cli.fail("--checkpoint-every: needs --checkpoint-dir");
  if (o.dropout >= 1) cli.fail("--dropout: must be below 1");
  if (o.sample > 0 && o.prompt.empty()) cli.fail("--prompt: needs at least one byte");
  return o;
}

}  // namespace train_gpt
