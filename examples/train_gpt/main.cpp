// train_gpt: data-parallel training of a GPT on a byte-level text corpus.
//
//   mpirun -np 2 build/examples/train_gpt --model gpt-tiny --steps 200
//
// Every byte is a token (vocabulary 256). Each optimizer step takes
// --batch-size sequences over all ranks, split into --grad-accum
// micro-batches per rank; all micro-batches but the last run under
// DistributedDataParallel::no_sync(), so gradients are averaged over the
// ranks once per step. The last line on stdout is a JSON object
// (Note [Metrics lines]). Flags: train_gpt --help, or docs/examples.md.
// With --fault-tolerant the loop of fault_tolerant.cpp runs instead (DDP on
// an ElasticGroup); what both loops share is in setup.h.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
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
#include "ddp/io/checkpoint.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/models/gpt.h"
#include "ddp/optim/adamw.h"
#include "ddp/optim/clip_grad.h"
#include "ddp/optim/lr_scheduler.h"
#include "ddp/parallel/comm_hooks.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/powersgd.h"
#include "train_gpt/options.h"
#include "train_gpt/setup.h"

namespace {

using namespace ddp;
namespace F = ddp::nn::functional;
using examples::JsonObject;
using train_gpt::Options;
using train_gpt::amp_dtype;
using train_gpt::lm_loss;
using train_gpt::make_config;
using train_gpt::print_sample;
using train_gpt::validate;

int run(const Options& o) {
  examples::Stopwatch total_clock;
  const nn::models::GPTConfig config = make_config(o);  // exits 2 on bad sizes, before joining
  dist::World world = examples::join_job(o.backend);
  // Note [Trainer preemption]: watched from here on, so a signal during
  // start-up, loading or a resume is kept for the first step boundary.
  std::unique_ptr<parallel::PreemptionWatcher> preemption =
      examples::watch_preemption(world, !o.checkpoint_dir.empty());
  const int rank = world.rank(), world_size = world.size();
  const bool lead = rank == 0;
  const int threads = world.device.is_cuda() ? 0 : examples::set_cpu_threads(world);
  const auto micro_or = examples::per_rank_batch(o.batch_size, world, o.grad_accum, "train_gpt");
  if (!micro_or) return 2;
  const int64_t micro = *micro_or;
  // Before any data or model work: a taken port or an unwritable folder
  // stops every rank now (Note [Monitoring starts on every rank or on none]).
  examples::Monitor monitor({.metrics_port = o.metrics_port, .job_name = o.job_name,
                             .tensorboard_dir = o.tensorboard,
                             .straggler_interval = o.straggler_every},
                            world, "train_gpt");
  manual_seed(uint64_t(o.seed));

  const int64_t T = config.block_size;
  const train_gpt::Corpus corpus = train_gpt::load_corpus(o, config);
  const data::DatasetPtr& train = corpus.train;
  const data::DatasetPtr& val = corpus.val;
  const std::string& corpus_text = corpus.description;

  auto model = std::make_shared<nn::models::GPT>(config);
  model->to(world.device);
  train_gpt::init_from_hf(*model, o, lead);
  if (lead) {
    std::printf("train_gpt: %s (%lld layers, %lld heads, width %lld, context %lld) on %s\n",
                o.model.c_str(), (long long)config.n_layer, (long long)config.n_head,
                (long long)config.n_embd, (long long)T, corpus_text.c_str());
    std::printf("%d rank(s), backend %s, device %s%s; parameters %lld; global batch %lld "
                "sequences = %lld per rank x %lld micro-batches; amp %s\n",
                world_size, world.group->backend_name().c_str(),
                examples::describe_device(world.device).c_str(),
                threads > 0 ? (", " + std::to_string(threads) + " thread(s) per rank").c_str() : "",
                (long long)model->num_parameters(), (long long)o.batch_size, (long long)micro,
                (long long)o.grad_accum, o.amp.c_str());
    if (o.print_params)
      for (const auto& [name, p] : model->named_parameters())
        std::printf("  %-40s %s\n", name.c_str(), p.describe().c_str());
    if (monitor.serving())
      std::printf("metrics: rank 0 serves http://0.0.0.0:%d/metrics (rank r: port %lld + local rank)\n",
                  monitor.port(), (long long)o.metrics_port);
    std::fflush(stdout);
  }
  parallel::DistributedDataParallel ddp_model(model, world.group, {.bucket_cap_mb = o.bucket_cap_mb});
  std::shared_ptr<parallel::PowerSGDState> powersgd = examples::register_comm_hook_option(
      ddp_model, o.comm_hook, o.powersgd_rank, o.powersgd_start_iter);
  if (lead && o.comm_hook != "allreduce") std::printf("comm hook: %s\n", o.comm_hook.c_str());

  auto sampler = std::make_shared<data::DistributedSampler>(train->size(), world_size, rank,
                                                            true, uint64_t(o.seed));
  data::DataLoader loader(train, {.batch_size = micro, .drop_last = true,
                                  .num_workers = int(o.workers), .seed = uint64_t(o.seed),
                                  .device = world.device},
                          sampler);
  const int64_t steps_per_epoch = loader.size() / o.grad_accum;
  if (steps_per_epoch < 1)
    throw ValueError("the corpus is too small for one step of " + std::to_string(o.batch_size) +
                     " sequences of " + std::to_string(T) + " tokens");
  train_gpt::Recipe recipe = train_gpt::make_recipe(*model, o);
  const int64_t schedule_steps = recipe.schedule_steps, warmup = recipe.warmup;
  const int64_t stop_step = o.max_steps >= 0 ? std::min(o.max_steps, schedule_steps) : schedule_steps;
  const int64_t epochs = (stop_step + steps_per_epoch - 1) / steps_per_epoch;  // for the progress line
  optim::AdamW& opt = *recipe.opt;
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
      const std::string batch = std::to_string(o.batch_size);
      if (info.metadata["model"] != o.model || info.metadata["global_batch"] != batch)
        throw ValueError("--resume: the checkpoint in '" + o.checkpoint_dir + "' is for " +
                         info.metadata["model"] + " with global batch " +
                         info.metadata["global_batch"] + ", not " + o.model +
                         " with global batch " + batch);
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
                .metadata = {{"model", o.model},
                                      {"global_batch", std::to_string(o.batch_size)},
                                      {"world_size", std::to_string(world_size)}}}, last);
  };

  examples::MetricsFile metrics(o.metrics, rank, /*append=*/step > 0);
  const int64_t tokens_per_step = o.batch_size * T;
  Tensor loss_acc = Tensor::zeros({}, TensorOptions(kFloat32).device(world.device));
  int64_t acc_steps = 0;
  examples::Stopwatch train_clock, interval_clock, step_clock;
  double train_s = 0, grad_norm = 0;
  int64_t interval_start = step;
  std::optional<double> val_loss;
  if (lead && step < stop_step)
    std::printf("training %lld steps (%lld per epoch, warmup %lld)\n", (long long)(stop_step - step),
                (long long)steps_per_epoch, (long long)warmup);

  interval_clock.reset();
  bool preempted = false;
  for (int64_t epoch = step / steps_per_epoch; step < stop_step && !preempted; ++epoch) {
    loader.set_epoch(epoch);
    int64_t skip = (step - epoch * steps_per_epoch) * o.grad_accum;  // batches done before a resume
    int64_t m = 0;  // micro-batch within the step
    // Only whole steps: the micro-batches left over at the end of an epoch
    // would otherwise accumulate into the next epoch's first step.
    int64_t batches_left = steps_per_epoch * o.grad_accum - skip;
    train_clock.reset();
    step_clock.reset();
    for (const data::Batch& b : loader) {
      if (skip > 0) { --skip; continue; }
      if (batches_left-- == 0) break;
      const bool sync = m + 1 == o.grad_accum;
      Tensor loss;
      {
        std::optional<parallel::DistributedDataParallelBase::NoSyncGuard> no_sync;
        if (!sync) no_sync.emplace(ddp_model);  // the forward decides; see docs/ddp.md
        std::optional<amp::Autocast> autocast;
        if (auto dt = amp_dtype(o.amp)) autocast.emplace(world.device, *dt);
        loss = lm_loss(ddp_model(b.input), b.target);
      }
      scaler.scale(loss * (1.0 / double(o.grad_accum))).backward();
      const auto backward_end = examples::Monitor::Clock::now();
      {
        NoGradGuard no_grad;
        loss_acc.add_(loss.detach().to(kFloat32), 1.0 / double(o.grad_accum));
      }
      if (!sync) { ++m; continue; }
      m = 0;
      if (o.grad_clip > 0) {
        scaler.unscale_(opt);
        grad_norm = optim::clip_grad_norm_(model->parameters(), o.grad_clip);
      }
      scaler.step(opt);
      scaler.update();
      opt.zero_grad();
      sched.step();
      ++step;
      ++acc_steps;
      // The timeline is the synchronised (last) micro-batch's backward.
      monitor.step_done(step_clock.seconds(), ddp_model.reducer().last_timeline(), backward_end);
      step_clock.reset();
      if (step % o.log_every == 0 || step == stop_step) {
        auto sums = examples::allreduce_sum(world, {double(loss_acc.item<float>()), double(acc_steps)});
        loss_acc.zero_();
        acc_steps = 0;
        const double mean_loss = sums[0] / std::max(1.0, sums[1]);
        const double rate = double((step - interval_start) * tokens_per_step) /
                            std::max(interval_clock.seconds(), 1e-9);
        interval_clock.reset();
        interval_start = step;
        const double elapsed = train_s + train_clock.seconds();
        const double lr = opt.param_groups()[0].lr.value_or(o.lr);
        const double memory_mib = examples::peak_memory_mib(world.device);
        monitor.logged(step, mean_loss, lr, rate / double(T), "tokens_per_s", rate, memory_mib);
        if (lead) {
          const double eta = elapsed / double(step - first_step) * double(stop_step - step);
          examples::print_progress({.epoch = epoch + 1, .epochs = epochs, .step = step,
                                    .total_steps = stop_step, .loss = mean_loss, .lr = lr,
                                    .rate = rate, .rate_unit = "tok/s", .eta_s = eta});
          metrics.write(JsonObject()
                            .add("step", step)
                            .add("epoch", double(step) / double(steps_per_epoch))
                            .add("loss", mean_loss)
                            .add("lr", lr)
                            .add("tokens_per_s", rate)
                            .add("grad_norm", grad_norm)
                            .add("loss_scale", scaler.get_scale())
                            .add("memory_mib", memory_mib));
        }
      }
      if (preemption && preemption->should_stop(step)) {
        preempted = true;
        break;
      }
      if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && step < stop_step) save(epoch, false);
      if (o.eval_every > 0 && step % o.eval_every == 0 && step < stop_step) {
        train_s += train_clock.seconds();
        examples::Stopwatch eval_clock;
        val_loss = validate(*model, val, o, micro, world);
        monitor.scalar("val/loss", *val_loss, step);
        if (lead) std::printf("step %lld: val loss %.4f\n", (long long)step, *val_loss);
        interval_clock.exclude(eval_clock.seconds());
        train_clock.reset();
      }
      if (step >= stop_step) break;
    }
    train_s += train_clock.seconds();
  }
  if (preempted) {
    save(step / steps_per_epoch, true);
    examples::report_preemption(world, *preemption, step);
    return 0;
  }
  val_loss = validate(*model, val, o, micro, world);
  monitor.scalar("val/loss", *val_loss, step);
  if (!o.checkpoint_dir.empty() && step > first_step) save(step / steps_per_epoch, true);

  const double tokens_per_s =
      train_s > 0 ? double((step - first_step) * tokens_per_step) / train_s : 0;
  int64_t sampled = 0;
  if (lead && o.sample > 0) sampled = print_sample(*model, o);
  const double total_s = total_clock.seconds();
  if (lead) {
    std::printf("done: %lld steps, val loss %.4f (%.3f bits/byte), %.0f tokens/s, training %s, "
                "total %s\n",
                (long long)step, *val_loss, *val_loss / std::log(2.0), tokens_per_s,
                examples::format_duration(train_s).c_str(), examples::format_duration(total_s).c_str());
    std::printf("%s\n", JsonObject()
                            .add("model", o.model)
                            .add("parameters", model->num_parameters())
                            .add("world_size", world_size)
                            .add("backend", world.group->backend_name())
                            .add("device", world.device.str())
                            .add("global_batch", o.batch_size)
                            .add("block_size", T)
                            .add("grad_accum", o.grad_accum)
                            .add("amp", o.amp)
                            .add("start_step", first_step)
                            .add("steps", step)
                            .add("val_loss", *val_loss)
                            .add("tokens_per_s", tokens_per_s)
                            .add("train_s", train_s)
                            .add("total_s", total_s)
                            .add("peak_memory_mib", examples::peak_memory_mib(world.device))
                            .add("sample_bytes", sampled)
                            .str()
                            .c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = train_gpt::parse_options(argc, argv);
  try {
    return options.fault_tolerant ? train_gpt::run_fault_tolerant(options) : run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return 1;
  }
}
