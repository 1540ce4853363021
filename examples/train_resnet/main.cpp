// train_resnet: data-parallel ResNet training, the README demo.
//
//   mpirun -np 2 build/examples/train_resnet --data fashion-mnist --epochs 2
//
// Every rank builds the same model, wraps it in DistributedDataParallel and
// trains on its shard of each global batch (DistributedSampler); rank 0
// prints progress, writes the metrics file and the checkpoint. The test
// split is sharded too and the correct counts are summed over the ranks.
// The last line on stdout is a JSON object (Note [Metrics lines]).
// Flags: train_resnet --help, or docs/examples.md.

#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include "common/checkpoint_saver.h"
#include "common/comm_hook_option.h"
#include "common/metrics.h"
#include "common/monitoring.h"
#include "common/trainer_util.h"
#include "ddp/ddp.h"
#include "ddp/amp/autocast.h"
#include "ddp/amp/grad_scaler.h"
#include "ddp/data/data.h"
#include "ddp/data/device_decode.h"
#include "ddp/io/checkpoint.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/layout_conversions.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/optim/lr_scheduler.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/powersgd.h"
#include "ddp/parallel/sync_batch_norm.h"
#include "train_resnet/options.h"
#include "train_resnet/setup.h"

namespace {

using namespace ddp;
namespace F = ddp::nn::functional;
using examples::JsonObject;
using train_resnet::Data;
using train_resnet::EvalResult;
using train_resnet::Options;
using train_resnet::amp_dtype;
using train_resnet::evaluate;
using train_resnet::load_data;
using train_resnet::make_model;
using train_resnet::use_channels_last;

// --decode-device cuda needs this rank on a GPU: without one it is a usage
// error, exit 2 naming the flag, as per_rank_batch's (rank 0 says why,
// with what device decoding lacks here). With a GPU but without nvJPEG it
// raises DeviceDecodeLoader's reason. Checked before any data or model work.
bool decode_device_usable(const Options& o, const dist::World& world) {
  if (o.decode_device != data::DecodeDevice::cuda) return true;
  const std::string why =
      data::device_decode_unavailable_reason(world.device.is_cuda() ? world.device.index : 0);
  if (!world.device.is_cuda()) {
    if (world.rank() == 0)
      std::fprintf(stderr,
                   "train_resnet: --decode-device cuda: needs a GPU, but this rank runs on %s%s\n",
                   world.device.str().c_str(), why.empty() ? "" : ("; " + why).c_str());
    return false;
  }
  if (!why.empty())
    throw DeviceError("--decode-device cuda: cannot decode on " + world.device.str() + ": " + why);
  return true;
}

int run(const Options& o) {
  examples::Stopwatch total_clock;
  dist::World world = examples::join_job(o.backend);
  // Note [Trainer preemption]: watched from here on, so a signal during
  // start-up, loading or a resume is kept for the first step boundary.
  std::unique_ptr<parallel::PreemptionWatcher> preemption =
      examples::watch_preemption(world, !o.checkpoint_dir.empty());
  const int rank = world.rank(), world_size = world.size();
  const bool lead = rank == 0;
  const int threads = world.device.is_cuda() ? 0 : examples::set_cpu_threads(world);
  const auto batch_or = examples::per_rank_batch(o.batch_size, world, 1, "train_resnet");
  if (!batch_or) return 2;
  const int64_t local_batch = *batch_or;
  if (!decode_device_usable(o, world)) return 2;
  // Before any data or model work: a taken port or an unwritable folder
  // stops every rank now (Note [Monitoring starts on every rank or on none]).
  examples::Monitor monitor({.metrics_port = o.metrics_port, .job_name = o.job_name,
                             .tensorboard_dir = o.tensorboard,
                             .straggler_interval = o.straggler_every},
                            world, "train_resnet");
  manual_seed(uint64_t(o.seed));

  Data d = load_data(o);
  auto model = make_model(o.model, d.channels, d.classes);
  if (o.sync_bn) parallel::convert_sync_batchnorm(*model, world.group);
  model->to(world.device);
  const bool channels_last = use_channels_last(o, world.device);
  if (channels_last) model->to(MemoryFormat::channels_last);
  if (lead) {
    std::printf("train_resnet: %s on %s, %d rank(s), backend %s, device %s%s\n", o.model.c_str(),
                d.train->describe().c_str(), world_size, world.group->backend_name().c_str(),
                examples::describe_device(world.device).c_str(),
                threads > 0 ? (", " + std::to_string(threads) + " thread(s) per rank").c_str() : "");
    std::printf("parameters: %lld; global batch %lld (%lld per rank); amp %s%s%s\n",
                (long long)model->num_parameters(), (long long)o.batch_size,
                (long long)local_batch, o.amp.c_str(),
                channels_last ? "; channels-last" : "; contiguous",
                o.sync_bn ? "; SyncBatchNorm" : "");
    if (o.comm_hook == "powersgd")
      std::printf("comm hook: powersgd, rank %lld, from step %lld\n", (long long)o.powersgd_rank,
                  (long long)o.powersgd_start_iter);
    else if (o.comm_hook != "allreduce")
      std::printf("comm hook: %s\n", o.comm_hook.c_str());
    if (o.print_params)
      for (const auto& [name, p] : model->named_parameters())
        std::printf("  %-40s %s\n", name.c_str(), p.describe().c_str());
    if (monitor.serving())
      std::printf("metrics: rank 0 serves http://0.0.0.0:%d/metrics (rank r: port %lld + local rank)\n",
                  monitor.port(), (long long)o.metrics_port);
    std::fflush(stdout);
  }
  parallel::DistributedDataParallel ddp_model(model, world.group,
                                              {.bucket_cap_mb = o.bucket_cap_mb});
  std::shared_ptr<parallel::PowerSGDState> powersgd = examples::register_comm_hook_option(
      ddp_model, o.comm_hook, o.powersgd_rank, o.powersgd_start_iter);

  auto sampler = std::make_shared<data::DistributedSampler>(d.train->size(), world_size, rank,
                                                            /*shuffle=*/true, uint64_t(o.seed));
  // The training loader: the CPU pipeline, or with --decode-device cuda the
  // GPU decoder over the same options and sampler (the same batches, crops
  // and flips; docs/data.md). train_epochs below takes either.
  const data::LoaderOptions train_options{.batch_size = local_batch, .num_workers = int(o.workers),
                                          .seed = uint64_t(o.seed), .device = world.device};
  std::optional<data::DataLoader> cpu_loader;
  std::optional<data::DeviceDecodeLoader> gpu_loader;
  if (o.decode_device == data::DecodeDevice::cuda) {
    // The image datasets transform while decoding; the GPU path has no
    // place for a transform after it.
    if (!d.train_transforms.empty())
      throw ValueError("--decode-device cuda: the training data has extra transforms, which only "
                       "the CPU loader applies");
    gpu_loader.emplace(std::static_pointer_cast<const data::EncodedImageDataset>(d.train),
                       train_options, sampler);
    if (lead)
      std::printf("decoding training images on the GPU: %s\n", gpu_loader->describe().c_str());
  } else {
    cpu_loader.emplace(d.train, train_options, sampler, d.train_transforms);
  }
  const int64_t steps_per_epoch = gpu_loader ? gpu_loader->size() : cpu_loader->size();
  train_resnet::Recipe recipe = train_resnet::make_recipe(*model, o, steps_per_epoch);
  const int64_t schedule_steps = recipe.schedule_steps, warmup = recipe.warmup;
  const int64_t stop_step =
      o.max_steps > 0 ? std::min(o.max_steps, schedule_steps) : schedule_steps;
  optim::SGD& opt = *recipe.opt;
  optim::WarmupCosineLR& sched = *recipe.sched;
  amp::GradScaler scaler({.enabled = o.amp == "f16"});
  io::Checkpoint ckpt;
  ckpt.add("model", model).add("optimizer", opt).add("scheduler", sched).add("scaler", scaler);
  // The bucket plan, and PowerSGD's per-rank memory, make a resumed run
  // continue bit for bit (Note [Per-rank checkpoint sections]).
  parallel::add_checkpoint_section(ckpt, "buckets", ddp_model);
  if (powersgd) parallel::add_checkpoint_section(ckpt, "powersgd", powersgd);

  int64_t step = 0;
  if (o.resume) {
    if (std::filesystem::exists(std::filesystem::path(o.checkpoint_dir) / io::kCheckpointManifest)) {
      auto info = io::read_checkpoint_info(o.checkpoint_dir);
      // The step count means the same only for the same data and global
      // batch; the number of ranks may change.
      const std::string batch = std::to_string(o.batch_size);
      if (info.metadata["model"] != o.model || info.metadata["data"] != o.data ||
          info.metadata["global_batch"] != batch)
        throw ValueError("--resume: the checkpoint in '" + o.checkpoint_dir + "' is for " +
                         info.metadata["model"] + " on " + info.metadata["data"] +
                         " with global batch " + info.metadata["global_batch"] + ", not " +
                         o.model + " on " + o.data + " with global batch " + batch);
      step = io::load_checkpoint(o.checkpoint_dir, ckpt,
                                 parallel::checkpoint_load_options(*world.group)).step;
      if (lead) std::printf("resumed from step %lld (%s)\n", (long long)step, o.checkpoint_dir.c_str());
    } else if (lead) {
      std::printf("no checkpoint in %s; starting from step 0\n", o.checkpoint_dir.c_str());
    }
  }
  const int64_t first_step = step;
  examples::CheckpointSaver saver(world, o.async_checkpoint, ckpt);
  auto save = [&](int64_t epoch, bool last) {
    saver.save(o.checkpoint_dir, ckpt,
               {.epoch = epoch, .step = step,
                .metadata = {{"model", o.model}, {"data", o.data},
                                      {"global_batch", std::to_string(o.batch_size)},
                                      {"world_size", std::to_string(world_size)}}}, last);
  };

  examples::MetricsFile metrics(o.metrics, rank, /*append=*/step > 0);
  Tensor loss_acc = Tensor::zeros({}, TensorOptions(kFloat32).device(world.device));
  int64_t acc_steps = 0;
  examples::Stopwatch train_clock, interval_clock, step_clock, wait_clock;
  double interval_stall_s = 0;  // waiting for batches since the last progress line
  double train_s = 0;
  int64_t conversions = 0;  // layout conversions in training steps (Note [Layout conversion count])
  int64_t interval_start = step;
  std::optional<EvalResult> result;

  if (lead && step < stop_step)
    std::printf("training %lld steps (%lld per epoch, %lld epochs, warmup %lld)\n",
                (long long)(stop_step - step), (long long)steps_per_epoch, (long long)o.epochs,
                (long long)warmup);
  interval_clock.reset();
  // The epochs, over either loader type (the data stall and the loader's
  // rate are measured the same way for both).
  bool preempted = false;
  auto train_epochs = [&](auto& loader) {
    for (int64_t epoch = step / steps_per_epoch; epoch < o.epochs && step < stop_step && !preempted;
         ++epoch) {
      loader.set_epoch(epoch);
      int64_t skip = step - epoch * steps_per_epoch;  // batches already done before a resume
      train_clock.reset();
      step_clock.reset();
      wait_clock.reset();
      for (const data::Batch& b : loader) {
        interval_stall_s += wait_clock.seconds();  // the data stall: next() kept the step waiting
        if (skip > 0) { --skip; continue; }
        const int64_t conversions_before = F::layout_conversion_count();
        Tensor x = channels_last ? F::to_channels_last(b.input) : b.input;
        Tensor loss;
        {
          std::optional<amp::Autocast> autocast;
          if (auto dt = amp_dtype(o.amp)) autocast.emplace(world.device, *dt);
          loss = F::cross_entropy(ddp_model(x), b.target);
        }
        opt.zero_grad();
        scaler.scale(loss).backward();
        const auto backward_end = examples::Monitor::Clock::now();
        scaler.step(opt);
        scaler.update();
        conversions += F::layout_conversion_count() - conversions_before;
        sched.step();
        ++step;
        monitor.step_done(step_clock.seconds(), ddp_model.reducer().last_timeline(), backward_end);
        step_clock.reset();
        {
          NoGradGuard no_grad;
          loss_acc.add_(loss.detach().to(kFloat32));
        }
        ++acc_steps;
        const bool last = step == stop_step || step % steps_per_epoch == 0;
        if (step % o.log_every == 0 || last) {
          auto sums = examples::allreduce_sum(world, {double(loss_acc.item<float>()), double(acc_steps)});
          loss_acc.zero_();
          acc_steps = 0;
          const double mean_loss = sums[0] / std::max(1.0, sums[1]);
          const double dt = interval_clock.seconds();
          const double rate = double((step - interval_start) * o.batch_size) / std::max(dt, 1e-9);
          interval_clock.reset();
          const int64_t interval_start_prev = interval_start;
          interval_start = step;
          const double elapsed = train_s + train_clock.seconds();
          const double eta = elapsed / double(step - first_step) * double(stop_step - step);
          const double lr = opt.param_groups()[0].lr.value_or(o.lr);
          const double memory_mib = examples::peak_memory_mib(world.device);
          const double stall = interval_stall_s / double(std::max<int64_t>(1, step - interval_start_prev));
          interval_stall_s = 0;
          const data::LoaderStats ls = loader.stats();
          const double loader_rate =
              ls.build_seconds > 0 ? double(ls.examples) / ls.build_seconds *
                                         double(std::max<int64_t>(1, o.workers)) * world_size
                                   : 0.0;
          monitor.logged(step, mean_loss, lr, rate, "images_per_s", rate, memory_mib);
          if (lead) {
            examples::print_progress({.epoch = epoch + 1, .epochs = o.epochs, .step = step,
                                      .total_steps = stop_step, .loss = mean_loss, .lr = lr,
                                      .rate = rate, .eta_s = eta, .data_stall_s = stall,
                                      .loader_rate = loader_rate});
            metrics.write(JsonObject()
                              .add("step", step)
                              .add("epoch", double(step) / double(steps_per_epoch))
                              .add("loss", mean_loss)
                              .add("lr", lr)
                              .add("images_per_s", rate)
                              .add("data_stall_s", stall)
                              .add("loader_images_per_s", loader_rate)
                              .add("loss_scale", scaler.get_scale())
                              .add("memory_mib", memory_mib));
          }
        }
        if (preemption && preemption->should_stop(step)) {
          preempted = true;
          break;
        }
        if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && step < stop_step) save(epoch, false);
        if (step >= stop_step) break;
        wait_clock.reset();
      }
      train_s += train_clock.seconds();
      if (!preempted && step % steps_per_epoch == 0) {  // a whole epoch: report test accuracy
        examples::Stopwatch eval_clock;
        result = evaluate(*model, d, o, channels_last, world);
        interval_clock.exclude(eval_clock.seconds());
        monitor.scalar("test/accuracy", result->accuracy, step);
        monitor.scalar("test/loss", result->loss, step);
        if (lead) {
          std::printf("epoch %lld: test accuracy %.2f%%  test loss %.4f  (%lld images)\n",
                      (long long)(epoch + 1), 100 * result->accuracy, result->loss,
                      (long long)result->examples);
          std::fflush(stdout);
        }
      }
    }
  };
  if (gpu_loader)
    train_epochs(*gpu_loader);
  else
    train_epochs(*cpu_loader);
  if (preempted) {
    save(step / steps_per_epoch, true);
    examples::report_preemption(world, *preemption, step);
    return 0;
  }
  if (step > first_step && step % steps_per_epoch != 0) {
    result = evaluate(*model, d, o, channels_last, world);
    monitor.scalar("test/accuracy", result->accuracy, step);
    monitor.scalar("test/loss", result->loss, step);
  }
  if (!result) result = evaluate(*model, d, o, channels_last, world);  // nothing left to train: just evaluate
  if (!o.checkpoint_dir.empty() && step > first_step) save(step / steps_per_epoch, true);

  const double images_per_s = train_s > 0 ? double((step - first_step) * o.batch_size) / train_s : 0;
  const double total_s = total_clock.seconds();
  if (lead) {
    std::printf("done: %lld steps, test accuracy %.2f%%, %.0f images/s, training %s, total %s\n",
                (long long)step, 100 * result->accuracy, images_per_s,
                examples::format_duration(train_s).c_str(), examples::format_duration(total_s).c_str());
    if (gpu_loader)
      std::printf("GPU decoding: rank 0 decoded %lld training images on the CPU (PNG, greyscale, "
                  "CMYK or refused by nvJPEG)\n",
                  (long long)gpu_loader->cpu_decoded());
    if (powersgd)
      std::printf("powersgd: %.2fx fewer gradient elements sent in the compressed steps (%lld -> %lld)\n",
                  powersgd->compression_rate(), (long long)powersgd->numel_before_compression(),
                  (long long)powersgd->numel_after_compression());
    std::printf("%s\n", JsonObject()
                            .add("model", o.model)
                            .add("data", o.data)
                            .add("world_size", world_size)
                            .add("backend", world.group->backend_name())
                            .add("device", world.device.str())
                            .add("global_batch", o.batch_size)
                            .add("amp", o.amp)
                            .add("memory_format", channels_last ? "channels-last" : "contiguous")
                            .add("layout_conversions_per_step",
                                 step > first_step ? double(conversions) / double(step - first_step) : 0.0)
                            .add("start_step", first_step)
                            .add("steps", step)
                            .add("epochs", double(step) / double(steps_per_epoch))
                            .add("test_accuracy", result->accuracy)
                            .add("test_loss", result->loss)
                            .add("images_per_s", images_per_s)
                            .add("train_s", train_s)
                            .add("total_s", total_s)
                            .add("peak_memory_mib", examples::peak_memory_mib(world.device))
                            .str()
                            .c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = train_resnet::parse_options(argc, argv);
  try {
    return options.fault_tolerant ? train_resnet::run_fault_tolerant(options) : run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_resnet: %s\n", e.what());
    return 1;
  }
}
