// train_resnet --fault-tolerant: the same model, data and recipe as the plain
// loop in main.cpp, on a parallel::ElasticGroup, so that a lost rank costs
// one step instead of a restart (docs/fault_tolerance.md).
//
//   ddprun --nproc-per-node 3:4 ./train_resnet --fault-tolerant --epochs 2
//
// Note [Fault-tolerant trainer]
// What differs from the plain loop, and why:
//  - Data: data::ElasticSampler instead of DistributedSampler, so a heal
//    re-partitions the rest of the epoch (Note [Elastic re-partition]). Each
//    step's indices go through a DataLoader pass of their own (no workers),
//    which applies the same transforms; the loss weights padding out and is
//    scaled so that the averaged gradient is that of the mean over the
//    step's real samples, whatever the world size.
//  - Every change of the training state (optimizer, sampler) is in
//    run_step's apply, and the state a joiner receives is the model, the
//    optimizer, the sampler and the generator. The learning rate is a
//    function of the samples consumed (the sampler's epoch and position),
//    not of the step count, which depends on the world sizes the run had.
//  - No collective outside run_step: progress lines print rank 0's own loss,
//    and the test accuracy is computed at the end by rank 0 alone (every
//    replica holds the same weights), so a loss during either costs nothing.
//  - The CPU only, gloo only, no AMP, no comm hooks, no checkpoints of its
//    own: the state lives in the peers.
// With --metrics FILE, the process that is rank 0 appends one line per
// committed step (step, wall time, world size, generation, images;
// examples::CommitLog): the chaos benchmark reads the time from a kill to
// the next commit from it. train_gpt --fault-tolerant follows the same
// rules (Note [Fault-tolerant GPT trainer] in train_gpt/fault_tolerant.cpp);
// what both use around the ElasticGroup is in common/elastic_util.h.

#include <cstdio>
#include <memory>

#include "common/elastic_util.h"
#include "common/metrics.h"
#include "common/trainer_util.h"
#include "ddp/data/elastic_sampler.h"
#include "ddp/dist/init.h"
#include "ddp/io/checkpoint.h"
#include "ddp/nn/functional/layout_conversions.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/optim/lr_scheduler.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/elastic.h"
#include "ddp/tensor/ops.h"
#include "train_resnet/setup.h"

namespace train_resnet {

namespace {

using namespace ddp;
namespace F = ddp::nn::functional;

// The indices of one step, for a DataLoader pass that builds that batch.
class StepIndices final : public data::Sampler {
 public:
  std::vector<int64_t> indices_now;
  int64_t size() const override { return int64_t(indices_now.size()); }
  std::vector<int64_t> indices() const override { return indices_now; }
};

}  // namespace

int run_fault_tolerant(const Options& o) {
  examples::Stopwatch total_clock;
  const dist::LaunchEnv env = dist::detect_launch_env();
  const int founders = std::max(1, env.world_size);
  if (o.batch_size % founders != 0) {
    if (env.rank == 0)
      std::fprintf(stderr,
                   "train_resnet: --batch-size %lld is not a multiple of the %d founding ranks\n",
                   (long long)o.batch_size, founders);
    return 2;
  }
  auto store = dist::connect_store(env);
  const int64_t local_batch = o.batch_size / founders;
  examples::set_cpu_threads(env);
  const Device device = Device::cpu();
  manual_seed(uint64_t(o.seed));

  Data d = load_data(o);
  auto model = make_model(o.model, d.channels, d.classes);
  const bool channels_last = use_channels_last(o, device);
  if (channels_last) model->to(MemoryFormat::channels_last);

  data::ElasticSampler sampler(d.train->size(), local_batch, /*shuffle=*/true, uint64_t(o.seed));
  // The run ends after --epochs epochs of data (or --max-steps steps): a
  // smaller world takes more, smaller steps. The learning rate follows the
  // data, not the steps: at every step it is the schedule's value after as
  // many founding-world steps as the samples consumed so far fill, so a
  // heal changes neither the schedule nor its end.
  const int64_t steps_per_epoch = sampler.steps_left(founders);
  Recipe recipe = make_recipe(*model, o, steps_per_epoch);
  const int64_t schedule_steps = recipe.schedule_steps;
  const int64_t stop_step = o.max_steps > 0 ? std::min(o.max_steps, schedule_steps) : schedule_steps;
  optim::SGD& opt = *recipe.opt;
  const optim::WarmupCosineLR& sched = *recipe.sched;
  io::Checkpoint state;  // with the default generator
  state.add("model", model).add("optimizer", opt).add("sampler", sampler);
  auto set_lr = [&] {
    const int64_t samples = sampler.epoch() * d.train->size() + sampler.position();
    const int64_t k = std::min(schedule_steps, samples / o.batch_size);
    for (size_t g = 0; g < opt.param_groups().size(); ++g) opt.param_groups()[g].lr = sched.lr_at(k, g);
  };

  const parallel::ElasticOptions eo = examples::elastic_options(env);
  examples::Stopwatch join_clock;
  parallel::ElasticGroup elastic(store, env.rank, founders, state, eo);
  const bool joined_late = elastic.joins() > 0;
  parallel::DistributedDataParallel ddp_model(
      model, elastic.group(), {.bucket_cap_mb = o.bucket_cap_mb, .fault_tolerant = true});
  examples::follow_membership(elastic, ddp_model, *model, opt, o.check_replicas);
  if (elastic.rank() == 0) {
    std::printf("train_resnet: %s on %s, fault-tolerant, %d rank(s) (min %d, max %d), %s\n",
                o.model.c_str(), d.train->describe().c_str(), elastic.size(), eo.min_size,
                eo.max_size, channels_last ? "channels-last" : "contiguous");
    std::printf("training about %lld steps (%lld per epoch at %d ranks), global batch %lld\n",
                (long long)(stop_step - elastic.step()), (long long)steps_per_epoch, founders,
                (long long)o.batch_size);
    std::fflush(stdout);
  }
  if (joined_late) examples::report_join(elastic, join_clock.seconds(), *model, opt, o.check_replicas);

  auto step_indices = std::make_shared<StepIndices>();
  data::DataLoader loader(d.train, {.batch_size = local_batch, .num_workers = 0,
                                    .seed = uint64_t(o.seed), .device = device},
                          step_indices, d.train_transforms);
  examples::CommitLog commits(o.metrics, "images");
  examples::Stopwatch train_clock;
  const int64_t first_step = elastic.step();
  int64_t images = 0;  // committed by the job while this process was a member
  double loss_sum = 0;
  int64_t loss_steps = 0;
  auto done = [&] {
    return sampler.epoch() >= o.epochs || (o.max_steps > 0 && elastic.step() >= o.max_steps);
  };
  while (!done()) {
    const int64_t step = elastic.step();
    set_lr();
    const data::ElasticBatch b = sampler.batch(elastic.rank(), elastic.size());
    step_indices->indices_now = b.indices;
    loader.set_epoch(sampler.epoch() * (int64_t(1) << 32) + sampler.position());
    Tensor x, y;
    for (const data::Batch& batch : loader) {
      x = channels_last ? F::to_channels_last(batch.input) : batch.input;
      y = batch.target;
    }
    const Tensor w = Tensor::from_vector(b.weights, {int64_t(b.weights.size())});
    const double scale = data::elastic_loss_scale(b, elastic.size());
    float loss_value = 0;
    const bool committed = elastic.run_step(
        [&] {
          Tensor per = F::cross_entropy(ddp_model(x), y, F::Reduction::none);
          Tensor weighted = sum(per * w);
          (weighted * scale).backward();
          loss_value = weighted.item<float>() / float(std::max<int64_t>(1, b.local_count()));
        },
        [&] {
          opt.step();
          opt.zero_grad();
          sampler.advance(elastic.size());
          if (sampler.epoch_done()) sampler.set_epoch(sampler.epoch() + 1);
        });
    if (!committed) continue;  // healed: redo the step with the new world
    images += b.global_count;
    loss_sum += loss_value;  // rank 0's mean over its real samples
    ++loss_steps;
    commits.write(elastic, b.global_count);
    if (elastic.rank() == 0) {
      if ((step + 1) % o.log_every == 0 || done()) {
        std::printf("step %lld/~%lld  epoch %lld  loss %.4f  lr %.4f  world %d  %.0f img/s\n",
                    (long long)(step + 1), (long long)stop_step, (long long)sampler.epoch() + 1,
                    loss_sum / double(std::max<int64_t>(1, loss_steps)),
                    opt.param_groups()[0].lr.value_or(o.lr), elastic.size(),
                    double(images) / std::max(1e-9, train_clock.seconds()));
        std::fflush(stdout);
        loss_sum = 0;
        loss_steps = 0;
      }
    }
  }
  const double train_s = train_clock.seconds();
  if (elastic.rank() != 0) return 0;

  const EvalResult result = evaluate_locally(*model, d, o, channels_last, device);
  std::printf("done: %lld steps, test accuracy %.2f%%, %.0f images/s, %lld heal(s), %lld join(s)\n",
              (long long)elastic.step(), 100 * result.accuracy,
              double(images) / std::max(1e-9, train_s), (long long)elastic.heals(),
              (long long)elastic.joins());
  std::printf("%s\n", examples::JsonObject()
                          .add("model", o.model)
                          .add("data", o.data)
                          .add("mode", "fault-tolerant")
                          .add("world_size", elastic.size())
                          .add("generation", elastic.generation())
                          .add("heals", elastic.heals())
                          .add("joins", elastic.joins())
                          .add("global_batch", o.batch_size)
                          .add("start_step", first_step)
                          .add("steps", elastic.step())
                          .add("test_accuracy", result.accuracy)
                          .add("test_loss", result.loss)
                          .add("images_per_s", double(images) / std::max(1e-9, train_s))
                          .add("train_s", train_s)
                          .add("total_s", total_clock.seconds())
                          .str()
                          .c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace train_resnet
