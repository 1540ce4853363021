// train_resnet's data, model, layout and evaluation (setup.h).

#include "train_resnet/setup.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "common/trainer_util.h"
#include "ddp/amp/autocast.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/functional/layout_conversions.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/tensor/ops.h"

namespace train_resnet {

using namespace ddp;
namespace F = ddp::nn::functional;

namespace {

bool cifar_style(const std::string& model) {
  return model == "resnet20" || model == "resnet32" || model == "resnet56";
}

// --data imagefolder:PATH / packed:PATH: ImageNet's recipe at --image-size
// (RandomResizedCrop + flip for training, Resize(size * 256/224) +
// CenterCrop for testing). PATH/train and PATH/val when PATH/train exists;
// else PATH is one class folder and every --holdout-every-th image of each
// class (positions k-1, 2k-1, ... in file order) is the test set.
void load_photographs(const Options& o, Data& d) {
  namespace fs = std::filesystem;
  const bool packed = o.data.rfind("packed:", 0) == 0;
  const std::string path = train_resnet::image_data_path(o.data);
  const int64_t side = o.image_size > 0 ? o.image_size : 224;
  auto train_t = data::ImageTransform::imagenet_train(side);
  auto test_t = data::ImageTransform::imagenet_eval(side, side * 256 / 224);
  train_t.dct_scaling = test_t.dct_scaling = !o.no_dct_scaling;
  const bool split = fs::is_directory(fs::path(path) / "train");
  if (packed) {
    if (!split || !fs::is_directory(fs::path(path) / "val"))
      throw ValueError("--data " + o.data + ": a packed folder needs PATH/train and PATH/val "
                       "(pack each split with tools/pack_images)");
    auto train = std::make_shared<data::PackedImageDataset>(path + "/train", train_t);
    d.classes = train->num_classes();
    d.train = train;
    d.test = std::make_shared<data::PackedImageDataset>(path + "/val", test_t);
  } else if (split) {
    auto train = std::make_shared<data::ImageFolderDataset>(path + "/train", train_t);
    d.classes = train->num_classes();
    d.train = train;
    d.test = std::make_shared<data::ImageFolderDataset>(path + "/val", test_t);
  } else {
    using Part = data::ImageFolderOptions::Part;
    auto train = std::make_shared<data::ImageFolderDataset>(
        path, train_t, data::ImageFolderOptions{.part = Part::rest, .holdout_every = o.holdout_every});
    d.classes = train->num_classes();
    d.train = train;
    d.test = std::make_shared<data::ImageFolderDataset>(
        path, test_t, data::ImageFolderOptions{.part = Part::held_out, .holdout_every = o.holdout_every});
  }
  d.channels = 3;
}

}  // namespace

Data load_data(const Options& o) {
  Data d;
  if (o.data == "fashion-mnist") {
    const std::string dir = o.data_dir.empty() ? "/usr/share/datasets/fashion-mnist" : o.data_dir;
    d.train = std::make_shared<data::MnistDataset>(dir, data::Split::train);
    d.test = std::make_shared<data::MnistDataset>(dir, data::Split::test);
    d.channels = 1;
    // Mean and std of the Fashion-MNIST training pixels.
    auto norm = std::make_shared<data::Normalize>(std::vector<float>{0.2860f},
                                                  std::vector<float>{0.3530f});
    d.train_transforms = {std::make_shared<data::RandomCrop>(28, 4),
                          std::make_shared<data::RandomHorizontalFlip>(0.5), norm};
    d.test_transforms = {norm};
  } else if (o.data == "cifar10") {
    const std::string dir = o.data_dir.empty() ? "data/cifar10" : o.data_dir;
    d.train = std::make_shared<data::Cifar10Dataset>(dir, data::Split::train);
    d.test = std::make_shared<data::Cifar10Dataset>(dir, data::Split::test);
    auto norm = std::make_shared<data::Normalize>(std::vector<float>{0.4914f, 0.4822f, 0.4465f},
                                                  std::vector<float>{0.2470f, 0.2435f, 0.2616f});
    d.train_transforms = {std::make_shared<data::RandomCrop>(32, 4),
                          std::make_shared<data::RandomHorizontalFlip>(0.5), norm};
    d.test_transforms = {norm};
  } else if (train_resnet::is_image_data(o.data)) {
    d.train_transforms.clear();  // the image datasets transform while decoding
    load_photographs(o, d);
  } else {  // synthetic: ImageNet-shaped (or CIFAR-shaped for the small ResNets), no transforms
    const int64_t side = o.image_size > 0 ? o.image_size : (cifar_style(o.model) ? 32 : 224);
    d.classes = cifar_style(o.model) ? 10 : 1000;
    d.train = std::make_shared<data::SyntheticImageDataset>(o.synthetic_size, Shape{3, side, side},
                                                            d.classes, uint64_t(o.seed));
    d.test = std::make_shared<data::SyntheticImageDataset>(
        std::max<int64_t>(1, o.synthetic_size / 10), Shape{3, side, side}, d.classes,
        uint64_t(o.seed) + 1);
  }
  return d;
}

std::shared_ptr<nn::models::ResNet> make_model(const std::string& name, int64_t channels,
                                               int64_t classes) {
  namespace M = nn::models;
  const M::ResNetOptions opts{channels, classes};
  static const std::map<std::string, std::function<std::shared_ptr<M::ResNet>(M::ResNetOptions)>>
      builders = {{"resnet20", M::resnet20}, {"resnet32", M::resnet32}, {"resnet56", M::resnet56},
                  {"resnet18", M::resnet18}, {"resnet34", M::resnet34}, {"resnet50", M::resnet50},
                  {"resnet101", M::resnet101}};
  return builders.at(name)(opts);
}

std::optional<DType> amp_dtype(const std::string& amp) {
  if (amp == "bf16") return DType::bf16;
  if (amp == "f16") return DType::f16;
  return std::nullopt;
}

Recipe make_recipe(const nn::Module& model, const Options& o, int64_t steps_per_epoch) {
  Recipe r;
  r.schedule_steps = steps_per_epoch * o.epochs;
  r.warmup = o.warmup_steps >= 0
                 ? std::min(o.warmup_steps, r.schedule_steps)
                 : std::min(r.schedule_steps,
                            int64_t(std::llround(o.warmup_epochs * double(steps_per_epoch))));
  r.opt = std::make_unique<optim::SGD>(examples::decay_groups(model), o.lr,
                                       optim::SGDOptions{.momentum = o.momentum,
                                                         .weight_decay = o.weight_decay,
                                                         .nesterov = o.momentum > 0});
  r.sched = std::make_unique<optim::WarmupCosineLR>(
      *r.opt, r.schedule_steps,
      optim::WarmupCosineOptions{.warmup_steps = r.warmup, .min_lr = o.min_lr});
  return r;
}

// Sharded evaluation: rank r sees positions r, r + R, ... of the unshuffled
// test indices; DistributedSampler pads them to a multiple of R with
// repeats, and those padding positions (>= n) are not counted, so the sums
// over the ranks cover each test example exactly once.
EvalResult evaluate(nn::models::ResNet& model, const Data& d, const Options& o, bool channels_last,
                    dist::World& world) {
  const int64_t n = o.eval_limit > 0 ? std::min(o.eval_limit, d.test->size()) : d.test->size();
  const int world_size = world.size(), rank = world.rank();
  auto sampler = std::make_shared<data::DistributedSampler>(n, world_size, rank, /*shuffle=*/false);
  const int64_t batch = std::max<int64_t>(1, o.batch_size / world_size) * 2;
  data::DataLoader loader(d.test, {.batch_size = batch, .num_workers = int(o.workers),
                                   .seed = uint64_t(o.seed), .device = world.device},
                          sampler, d.test_transforms);
  model.eval();
  double correct = 0, loss_sum = 0, counted = 0;
  int64_t position = 0;  // index of this rank's next example in its shard
  {
    NoGradGuard no_grad;
    for (const data::Batch& b : loader) {
      const int64_t rows = b.size();
      // Rows whose global position r + j*R is padding (>= n) are dropped.
      int64_t keep = 0;
      while (keep < rows && rank + (position + keep) * world_size < n) ++keep;
      position += rows;
      if (keep == 0) continue;
      Tensor x = b.input.narrow(0, 0, keep), y = b.target.narrow(0, 0, keep);
      if (channels_last) x = F::to_channels_last(x);
      std::optional<amp::Autocast> autocast;
      if (auto dt = amp_dtype(o.amp)) autocast.emplace(world.device, *dt);
      Tensor logits = model.forward(x);
      loss_sum += F::cross_entropy(logits.to(kFloat32), y, F::Reduction::sum).item<float>();
      correct += double(sum(eq(argmax(logits, 1), y).to(kInt64)).item<int64_t>());
      counted += double(keep);
    }
  }
  model.train();
  auto sums = examples::allreduce_sum(world, {correct, loss_sum, counted});
  return {sums[0] / std::max(1.0, sums[2]), sums[1] / std::max(1.0, sums[2]), int64_t(sums[2])};
}

// Note [Trainer memory format]
// --memory-format auto picks the layout that trains faster: channels-last on
// GPUs (cuDNN's tensor-core convolutions read NHWC), and on the CPU the one
// measured faster with oneDNN for the README's 2-rank job (docs/benchmarks.md,
// "Channels-last DDP on the CPU"). The model is converted before DDP wraps
// it, so weights, gradients, buckets and optimizer state are all in it.
constexpr bool kCpuPrefersChannelsLast = true;

bool use_channels_last(const Options& o, const Device& device) {
  if (o.memory_format == "auto") return device.is_cuda() || kCpuPrefersChannelsLast;
  return o.memory_format == "channels-last";
}

EvalResult evaluate_locally(nn::models::ResNet& model, const Data& d, const Options& o,
                            bool channels_last, const Device& device) {
  const int64_t n = o.eval_limit > 0 ? std::min(o.eval_limit, d.test->size()) : d.test->size();
  auto sampler = std::make_shared<data::SequentialSampler>(n);
  data::DataLoader loader(d.test, {.batch_size = std::max<int64_t>(1, o.batch_size), .num_workers = 0,
                                   .seed = uint64_t(o.seed), .device = device},
                          sampler, d.test_transforms);
  model.eval();
  double correct = 0, loss_sum = 0, counted = 0;
  {
    NoGradGuard no_grad;
    for (const data::Batch& b : loader) {
      Tensor x = channels_last ? F::to_channels_last(b.input) : b.input;
      Tensor logits = model.forward(x);
      loss_sum += F::cross_entropy(logits.to(kFloat32), b.target, F::Reduction::sum).item<float>();
      correct += double(sum(eq(argmax(logits, 1), b.target).to(kInt64)).item<int64_t>());
      counted += double(b.size());
    }
  }
  model.train();
  return {correct / std::max(1.0, counted), loss_sum / std::max(1.0, counted), int64_t(counted)};
}

}  // namespace train_resnet
