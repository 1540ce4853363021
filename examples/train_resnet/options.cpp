#include "train_resnet/options.h"

#include "common/cli.h"
#include "ddp/core/error.h"

namespace train_resnet {

bool is_image_data(const std::string& data) {
  return data.rfind("imagefolder:", 0) == 0 || data.rfind("packed:", 0) == 0;
}

std::string image_data_path(const std::string& data) {
  return data.substr(data.find(':') + 1);
}

Options parse_options(int argc, char** argv) {
  Options o;
  examples::Cli cli("train_resnet",
                    "Trains a ResNet with DistributedDataParallel on Fashion-MNIST, CIFAR-10 or\n"
                    "synthetic images. Launch with mpirun, srun, ddprun or torchrun --no-python.");
  cli.add_string("--model", &o.model, "architecture",
                 {"resnet20", "resnet32", "resnet56", "resnet18", "resnet34", "resnet50",
                  "resnet101"});
  cli.add_value("--data", "fashion-mnist|cifar10|synthetic|imagefolder:PATH|packed:PATH",
                "dataset; imagefolder: and packed: read photographs (PATH/train and PATH/val, "
                "or a flat class folder with every --holdout-every-th image held out)",
                o.data, [&o](const std::string& v) -> std::string {
                  const bool known = v == "fashion-mnist" || v == "cifar10" || v == "synthetic";
                  if (!known && !(is_image_data(v) && image_data_path(v).size() > 0))
                    return "'" + v +
                           "' is not one of fashion-mnist, cifar10, synthetic, imagefolder:PATH, "
                           "packed:PATH";
                  o.data = v;
                  return "";
                });
  cli.add_string("--data-dir", &o.data_dir,
                 "dataset folder (default /usr/share/datasets/fashion-mnist, or ./data/cifar10)");
  cli.add_int("--holdout-every", &o.holdout_every,
              "imagefolder: without PATH/val, every N-th image of each class is the test set", 2);
  cli.add_flag("--no-dct-scaling", &o.no_dct_scaling,
               "imagefolder/packed: decode JPEGs at full size (PIL's exact pixels), never at "
               "1/2, 1/4 or 1/8");
  cli.add_value("--decode-device", "cpu|cuda",
                "imagefolder/packed: where the training JPEGs are decoded; cuda: by nvJPEG on the "
                "GPU, at full size (needs a GPU and libnvjpeg; docs/data.md). Evaluation stays "
                "on the CPU loader; the loader rate then counts reading and crop drawing",
                "cpu", [&o](const std::string& v) -> std::string {
                  try {
                    o.decode_device = ddp::data::parse_decode_device(v);
                  } catch (const ddp::ValueError&) {
                    return "'" + v + "' is not one of cpu, cuda";
                  }
                  return "";
                });
  cli.add_int("--epochs", &o.epochs, "passes over the training set; sets the lr schedule", 1);
  cli.add_int("--max-steps", &o.max_steps,
              "stop after this many optimizer steps in total (0: no limit; the schedule keeps "
              "--epochs)",
              0);
  cli.add_int("--batch-size", &o.batch_size, "GLOBAL batch; each rank takes batch / world size", 1);
  cli.add_double("--lr", &o.lr, "peak learning rate (for the global batch)", 0);
  cli.add_double("--momentum", &o.momentum, "SGD Nesterov momentum", 0);
  cli.add_double("--weight-decay", &o.weight_decay, "L2 on conv/linear weights only", 0);
  cli.add_int("--warmup-steps", &o.warmup_steps, "linear warmup steps (overrides --warmup-epochs)", 0);
  cli.add_double("--warmup-epochs", &o.warmup_epochs, "linear warmup length in epochs", 0);
  cli.add_double("--min-lr", &o.min_lr, "lr at the end of the cosine", 0);
  cli.add_string("--amp", &o.amp, "mixed precision (f16 adds a GradScaler)", {"off", "bf16", "f16"});
  cli.add_string("--memory-format", &o.memory_format,
                 "layout of the model and its images (auto: channels-last on GPUs, the faster "
                 "one measured on the CPU; docs/examples.md)",
                 {"auto", "contiguous", "channels-last"});
  bool channels_last_flag = false;
  cli.add_flag("--channels-last", &channels_last_flag, "the same as --memory-format channels-last");
  cli.add_flag("--sync-bn", &o.sync_bn, "convert BatchNorm2d to SyncBatchNorm");
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
  cli.add_string("--metrics", &o.metrics, "write one JSON line per logged step to this file");
  cli.add_int("--metrics-port", &o.metrics_port,
              "serve Prometheus metrics at /metrics on PORT + local rank (0: off)", 0);
  cli.add_string("--job-name", &o.job_name, "the job label of the metrics (default: train_resnet)");
  cli.add_string("--tensorboard", &o.tensorboard, "write TensorBoard scalars (rank 0) to this folder");
  cli.add_int("--straggler-every", &o.straggler_every,
              "steps between straggler checks, one tiny allgather each (0: off; docs/ddp.md)", 0);
  cli.add_int("--log-every", &o.log_every, "steps between progress lines and metrics lines", 1);
  cli.add_flag("--print-params", &o.print_params, "print every parameter's name and shape");
  cli.add_int("--seed", &o.seed, "seed of the initial weights, shuffling and augmentation", 0);
  cli.add_int("--workers", &o.workers, "data loader threads per rank", 0);
  cli.add_int("--eval-limit", &o.eval_limit, "evaluate on the first N test images (0: all)", 0);
  cli.add_int("--synthetic-size", &o.synthetic_size, "training images of --data synthetic", 1);
  cli.add_int("--image-size", &o.image_size,
              "synthetic or photograph side (0: 32 or 224 by model; photographs 224)", 0);
  cli.parse(argc, argv);
  if (channels_last_flag) {
    if (cli.given("--memory-format") && o.memory_format != "channels-last")
      cli.fail("--channels-last: contradicts --memory-format " + o.memory_format);
    o.memory_format = "channels-last";
  }
  if (o.metrics_port > 65535) cli.fail("--metrics-port: " + std::to_string(o.metrics_port) + " is above 65535");
  if (cli.given("--job-name") && o.metrics_port == 0) cli.fail("--job-name: needs --metrics-port");
  if (o.resume && o.checkpoint_dir.empty()) cli.fail("--resume: needs --checkpoint-dir");
  if (o.async_checkpoint && o.checkpoint_dir.empty()) cli.fail("--async-checkpoint: needs --checkpoint-dir");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty())
    cli.fail("--checkpoint-every: needs --checkpoint-dir");
  if (o.data != "synthetic" && !is_image_data(o.data) && cli.given("--image-size"))
    cli.fail("--image-size: only for --data synthetic, imagefolder:PATH or packed:PATH");
  if (!is_image_data(o.data) && cli.given("--holdout-every"))
    cli.fail("--holdout-every: only for --data imagefolder:PATH");
  if (!is_image_data(o.data) && o.no_dct_scaling)
    cli.fail("--no-dct-scaling: only for --data imagefolder:PATH or packed:PATH");
  // Whether this rank has a GPU is known once the job is joined (run() checks).
  if (!is_image_data(o.data) && o.decode_device == ddp::data::DecodeDevice::cuda)
    cli.fail("--decode-device cuda: only for --data imagefolder:PATH or packed:PATH");
  if (o.check_replicas && !o.fault_tolerant) cli.fail("--check-replicas: needs --fault-tolerant");
  if (o.fault_tolerant) {
    // Note [Fault-tolerant trainer] (fault_tolerant.cpp): what that loop does not have.
    for (const char* flag : {"--amp", "--comm-hook", "--sync-bn", "--checkpoint-dir", "--resume",
                             "--metrics-port", "--tensorboard", "--decode-device"})
      if (cli.given(flag)) cli.fail(std::string("--fault-tolerant: takes no ") + flag);
    if (!o.backend.empty() && o.backend != "gloo") cli.fail("--fault-tolerant: runs on gloo only");
  }
  if (o.comm_hook != "powersgd" && (cli.given("--powersgd-rank") || cli.given("--powersgd-start-iter")))
    cli.fail("--powersgd-rank, --powersgd-start-iter: need --comm-hook powersgd");
  return o;
}

}  // namespace train_resnet
