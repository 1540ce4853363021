// train_gpt --fault-tolerant: the same model, corpus, AdamW recipe and loss
// as the plain loop in main.cpp, on a parallel::ElasticGroup, so that a lost
// rank costs one step instead of a restart (docs/fault_tolerance.md).
//
//   ddprun --nproc-per-node 2:3 ./train_gpt --fault-tolerant --steps 200
//
// Note [Fault-tolerant GPT trainer]
// Note [Fault-tolerant trainer] (train_resnet/fault_tolerant.cpp) applied to
// a language model; what is particular to it:
//  - Data: the corpus's training windows (TokenWindowDataset: window i is
//    the block_size tokens at i * --stride, and its targets shifted by one)
//    are the indexable set that data::ElasticSampler partitions, as
//    DistributedSampler does in the plain loop. A rank's share of a step is
//    batch / (founders x grad-accum) windows per micro-batch; its windows
//    are read in the loop (--workers is not used). Without failures the
//    ranks see the same windows in the same micro-batches as the plain loop:
//    both deal the epoch's permutation out in strides of the world size.
//    Unlike the plain loop (drop_last), the short last step of an epoch is
//    trained too, with padding weighted out.
//  - The end and the learning rate follow the data, not the step count: the
//    run consumes the sequences of --steps (or --max-steps) full steps,
//    --batch-size each, and every step's lr is the schedule's value after as
//    many full steps as the sequences consumed so far fill. After a heal the
//    steps are smaller and more, but neither the schedule nor the data of
//    the run changes; the last step may overshoot by less than one step.
//  - Gradient accumulation: every micro-batch of a step runs inside
//    run_step's compute, all but the last under no_sync, so the one
//    allreduce is the last backward's and a lost peer fails only that one.
//    compute first zeroes the gradients: a compute that fails in the last
//    micro-batch's forward (before any bucket exists to clear, Note [Bucket
//    errors]) would otherwise leave the earlier micro-batches' local
//    gradients for the redone step to add to.
//  - The loss is the weighted sum of each window's mean token loss, scaled
//    by data::elastic_loss_scale: the averaged gradient is that of the mean
//    token loss over the step's real windows (every window has T tokens),
//    which is the plain loop's loss / grad-accum summed over micro-batches.
//  - Gradient clipping, the optimizer step, the sampler's advance and the
//    epoch change are apply; the lr is set from the sampler before each
//    step (a pure function of the committed state, so it is not in the
//    state). The state a joiner receives: model, optimizer, sampler and the
//    default generator (dropout's).
//  - No collective outside run_step: progress lines print rank 0's own
//    loss; the validation loss (the plain run's windows, over the founding
//    world) and --sample are computed at the end by rank 0 alone.
//  - Refused (exit 2, naming the flag; options.cpp): --amp, checkpoints
//    (--checkpoint-dir, --resume, ...: the state lives in the peers),
//    --eval-every, the monitoring flags, a backend other than gloo; and a
//    machine with a visible GPU, since this loop trains on the CPU only.
// --metrics FILE gets one line per committed step (examples::CommitLog,
// counting "sequences"), as train_resnet's.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include "common/elastic_util.h"
#include "common/metrics.h"
#include "common/trainer_util.h"
#include "ddp/data/elastic_sampler.h"
#include "ddp/dist/init.h"
#include "ddp/io/checkpoint.h"
#include "ddp/optim/clip_grad.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/elastic.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "train_gpt/setup.h"

namespace train_gpt {

namespace {

using namespace ddp;
namespace F = ddp::nn::functional;

// One micro-batch of a rank's share of a step: the windows and their
// weights (0 for the sampler's padding).
struct MicroBatch {
  Tensor x, y, w;
  int64_t real = 0;  // windows of weight 1
};

// Reads windows indices[begin, end) into [B, T] token tensors.
MicroBatch read_windows(const data::Dataset& windows, const data::ElasticBatch& b, size_t begin,
                        size_t end) {
  const data::ExampleSpec& spec = windows.spec();
  const int64_t rows = int64_t(end - begin);
  Shape xs{rows}, ys{rows};
  xs.insert(xs.end(), spec.input_shape.begin(), spec.input_shape.end());
  ys.insert(ys.end(), spec.target_shape.begin(), spec.target_shape.end());
  MicroBatch m;
  m.x = Tensor::empty(xs, TensorOptions(spec.input_dtype));
  m.y = Tensor::empty(ys, TensorOptions(spec.target_dtype));
  auto* xp = static_cast<uint8_t*>(m.x.data_ptr());
  auto* yp = static_cast<uint8_t*>(m.y.data_ptr());
  std::vector<float> w(b.weights.begin() + ptrdiff_t(begin), b.weights.begin() + ptrdiff_t(end));
  for (size_t i = begin; i < end; ++i) {
    windows.read(b.indices[i], xp + (i - begin) * spec.input_bytes(),
                 yp + (i - begin) * spec.target_bytes());
    m.real += b.weights[i] > 0 ? 1 : 0;
  }
  m.w = Tensor::from_vector(w, {rows});
  return m;
}

}  // namespace

int run_fault_tolerant(const Options& o) {
  examples::Stopwatch total_clock;
  const nn::models::GPTConfig config = make_config(o);  // exits 2 on bad sizes
  const dist::LaunchEnv env = dist::detect_launch_env();
  const int founders = std::max(1, env.world_size);
  const bool first = env.rank == 0;  // says why it refuses, once
  // Note [Fault-tolerant GPT trainer]: the CPU only. Training a GPT on the
  // CPU of a GPU machine without saying so would be a surprise; hiding the
  // GPUs makes the choice explicit.
  if (const int gpus = cuda::device_count(); gpus > 0) {
    if (first)
      std::fprintf(stderr,
                   "train_gpt: --fault-tolerant: trains on the CPU only (gloo), but %d GPU(s) are "
                   "visible; set CUDA_VISIBLE_DEVICES=-1 to train on the CPU\n",
                   gpus);
    return 2;
  }
  const int64_t parts = int64_t(founders) * o.grad_accum;
  if (o.batch_size % parts != 0) {
    if (first)
      std::fprintf(stderr,
                   "train_gpt: --batch-size: the global batch %lld is not divisible by the %d "
                   "founding rank(s) x grad-accum %lld\n",
                   (long long)o.batch_size, founders, (long long)o.grad_accum);
    return 2;
  }
  const int64_t micro = o.batch_size / parts;  // windows per micro-batch and rank
  auto store = dist::connect_store(env);
  const int threads = examples::set_cpu_threads(env);
  const Device device = Device::cpu();
  manual_seed(uint64_t(o.seed));

  const int64_t T = config.block_size;
  const Corpus corpus = load_corpus(o, config);
  auto model = std::make_shared<nn::models::GPT>(config);
  init_from_hf(*model, o, first);

  const int64_t n = corpus.train->size();
  data::ElasticSampler sampler(n, micro * o.grad_accum, /*shuffle=*/true, uint64_t(o.seed));
  Recipe recipe = make_recipe(*model, o);
  optim::AdamW& opt = *recipe.opt;
  const optim::WarmupCosineLR& sched = *recipe.sched;
  const int64_t stop_step =
      o.max_steps >= 0 ? std::min(o.max_steps, recipe.schedule_steps) : recipe.schedule_steps;
  const int64_t target = stop_step * o.batch_size;  // sequences of the run
  auto consumed = [&] { return sampler.epoch() * n + sampler.position(); };
  auto set_lr = [&] {
    const int64_t k = std::min(recipe.schedule_steps, consumed() / o.batch_size);
    for (size_t g = 0; g < opt.param_groups().size(); ++g)
      opt.param_groups()[g].lr = sched.lr_at(k, g);
  };
  io::Checkpoint state;  // with the default generator
  state.add("model", model).add("optimizer", opt).add("sampler", sampler);

  const parallel::ElasticOptions eo = examples::elastic_options(env);
  examples::Stopwatch join_clock;
  parallel::ElasticGroup elastic(store, env.rank, founders, state, eo);
  const bool joined_late = elastic.joins() > 0;
  parallel::DistributedDataParallel ddp_model(
      model, elastic.group(), {.bucket_cap_mb = o.bucket_cap_mb, .fault_tolerant = true});
  examples::follow_membership(elastic, ddp_model, *model, opt, o.check_replicas);
  if (elastic.rank() == 0) {
    std::printf("train_gpt: %s (%lld layers, %lld heads, width %lld, context %lld) on %s\n",
                o.model.c_str(), (long long)config.n_layer, (long long)config.n_head,
                (long long)config.n_embd, (long long)T, corpus.description.c_str());
    std::printf(
        "fault-tolerant, %d rank(s) (min %d, max %d), backend gloo, device %s, %d "
        "thread(s) per rank; parameters %lld; global batch %lld sequences = %lld per "
        "rank x %lld micro-batches at %d ranks\n",
        elastic.size(), eo.min_size, eo.max_size, examples::describe_device(device).c_str(),
        threads, (long long)model->num_parameters(), (long long)o.batch_size, (long long)micro,
        (long long)o.grad_accum, founders);
    std::printf("training %lld sequences (%lld steps at %d ranks, warmup %lld)\n",
                (long long)std::max<int64_t>(0, target - consumed()), (long long)stop_step,
                founders, (long long)recipe.warmup);
    std::fflush(stdout);
  }
  if (joined_late)
    examples::report_join(elastic, join_clock.seconds(), *model, opt, o.check_replicas);

  examples::CommitLog commits(o.metrics, "sequences");
  examples::Stopwatch train_clock;
  const int64_t first_step = elastic.step();
  int64_t sequences = 0;  // committed by the job while this process was a member
  double loss_sum = 0, grad_norm = 0;
  int64_t loss_steps = 0;
  auto done = [&] { return consumed() >= target; };
  while (!done()) {
    const int64_t step = elastic.step();
    set_lr();
    const data::ElasticBatch b = sampler.batch(elastic.rank(), elastic.size());
    // The micro-batches: every rank has as many entries (ceil(G / W)), so
    // as many micro-batches; fewer than --grad-accum only in an epoch's
    // short last step.
    std::vector<MicroBatch> micros;
    for (size_t i = 0; i < b.indices.size(); i += size_t(micro))
      micros.push_back(
          read_windows(*corpus.train, b, i, std::min(b.indices.size(), i + size_t(micro))));
    const double scale = data::elastic_loss_scale(b, elastic.size());
    double loss_value = 0;
    const bool committed = elastic.run_step(
        [&] {
          opt.zero_grad();  // Note [Fault-tolerant GPT trainer]: a redone step starts clean
          double weighted_sum = 0;
          for (size_t k = 0; k < micros.size(); ++k) {
            const MicroBatch& m = micros[k];
            Tensor logits;
            {
              std::optional<parallel::DistributedDataParallelBase::NoSyncGuard> no_sync;
              if (k + 1 < micros.size()) no_sync.emplace(ddp_model);  // the forward decides
              logits = ddp_model(m.x);
            }
            // Each window's mean token loss, weighted (padding 0) and summed.
            Tensor per_window =
                mean(lm_loss(logits, m.y, F::Reduction::none).reshape({-1, T}), {1});
            Tensor weighted = sum(per_window * m.w);
            (weighted * scale).backward();
            weighted_sum += double(weighted.item<float>());
          }
          loss_value = weighted_sum / double(std::max<int64_t>(1, b.local_count()));
        },
        [&] {
          if (o.grad_clip > 0) grad_norm = optim::clip_grad_norm_(model->parameters(), o.grad_clip);
          opt.step();
          opt.zero_grad();
          sampler.advance(elastic.size());
          if (sampler.epoch_done()) sampler.set_epoch(sampler.epoch() + 1);
        });
    if (!committed) continue;  // healed: redo the step with the new world
    sequences += b.global_count;
    loss_sum += loss_value;  // rank 0's mean over its real windows
    ++loss_steps;
    commits.write(elastic, b.global_count);
    if (elastic.rank() == 0 && ((step + 1) % o.log_every == 0 || done())) {
      std::printf(
          "step %lld/~%lld  loss %.4f  lr %.4g  grad norm %.3f  world %d  %.0f tok/s  "
          "(%.0f%% of the sequences)\n",
          (long long)(step + 1), (long long)stop_step,
          loss_sum / double(std::max<int64_t>(1, loss_steps)),
          opt.param_groups()[0].lr.value_or(o.lr), grad_norm, elastic.size(),
          double(sequences * T) / std::max(1e-9, train_clock.seconds()),
          100.0 * double(std::min(consumed(), target)) / double(std::max<int64_t>(1, target)));
      std::fflush(stdout);
      loss_sum = 0;
      loss_steps = 0;
    }
  }
  const double train_s = train_clock.seconds();
  if (elastic.rank() != 0) return 0;

  // Every replica holds the same weights: rank 0 alone validates on the
  // windows the plain run would (--val-batches over the founding world).
  const double val_loss = validate_locally(*model, corpus.val, o, micro, founders, device);
  const int64_t sampled = o.sample > 0 ? print_sample(*model, o) : 0;
  const double tokens_per_s = double(sequences * T) / std::max(1e-9, train_s);
  const double total_s = total_clock.seconds();
  std::printf(
      "done: %lld steps, val loss %.4f (%.3f bits/byte), %.0f tokens/s, %lld heal(s), "
      "%lld join(s), training %s, total %s\n",
      (long long)elastic.step(), val_loss, val_loss / std::log(2.0), tokens_per_s,
      (long long)elastic.heals(), (long long)elastic.joins(),
      examples::format_duration(train_s).c_str(), examples::format_duration(total_s).c_str());
  std::printf("%s\n", examples::JsonObject()
                          .add("model", o.model)
                          .add("parameters", model->num_parameters())
                          .add("mode", "fault-tolerant")
                          .add("world_size", elastic.size())
                          .add("generation", elastic.generation())
                          .add("heals", elastic.heals())
                          .add("joins", elastic.joins())
                          .add("backend", "gloo")
                          .add("device", device.str())
                          .add("global_batch", o.batch_size)
                          .add("block_size", T)
                          .add("grad_accum", o.grad_accum)
                          .add("amp", "off")
                          .add("start_step", first_step)
                          .add("steps", elastic.step())
                          .add("sequences", consumed())
                          .add("val_loss", val_loss)
                          .add("tokens_per_s", tokens_per_s)
                          .add("train_s", train_s)
                          .add("total_s", total_s)
                          .add("peak_memory_mib", examples::peak_memory_mib(device))
                          .add("sample_bytes", sampled)
                          .str()
                          .c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace train_gpt
