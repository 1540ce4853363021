// bench_data: throughput of the ImageNet training input pipeline (issue 27).
//
//   bench_data --data imagefolder:/data/photos --workers 2 --batch-size 64 --steps 30 --json d.json
//   bench_data --data packed:/data/photos_packed --workers 2
//   bench_data --data imagefolder:/data/photos --model resnet50 --train-steps 3
//
// Times `--steps` batches after `--warmup` untimed ones of a DataLoader over
// an ImageFolderDataset or PackedImageDataset with the training transform
// (decode + RandomResizedCrop + flip + normalise, written into the batch;
// pinned when a GPU is usable), and reports images/s and the peak resident
// memory of the process (getrusage: the kernel's high-water mark). With
// --train-steps it then trains the model on those batches and reports how
// long each step waited for its batch (the data stall). Its PyTorch twin is
// benchmarks/reference/bench_data.py; results in docs/benchmarks.md.

#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/cli.h"
#include "common/hardware.h"
#include "common/models.h"
#include "common/report.h"
#include "common/train_step.h"
#include "ddp/data/data_loader.h"
#include "ddp/data/image_folder.h"
#include "ddp/data/packed_images.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/cuda.h"
#include "ddp/version.h"

namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string data;
  int64_t workers = 2, batch_size = 64, steps = 30, warmup = 3, image_size = 224;
  std::string dtype = "f32";
  bool channels_last = false, no_dct = false;
  std::string model;
  int64_t train_steps = 0, threads = 0, dct_error = 0;
  std::string json_path;
};

Options parse(int argc, char** argv) {
  Options o;
  ArgParser args("bench_data",
                 "Times the ImageNet training input pipeline (decode, RandomResizedCrop, flip,\n"
                 "normalise, collate) of an image folder or packed shards; reports images/s and\n"
                 "peak resident memory, and with --train-steps the data stall of training steps.");
  args.add_string("--data", &o.data, "imagefolder:PATH or packed:PATH (PATH/train when present)",
                  {}, "KIND:PATH");
  args.add_int("--workers", &o.workers, "loader worker threads", 0);
  args.add_int("--batch-size", &o.batch_size, "images per batch", 1);
  args.add_int("--steps", &o.steps, "timed batches", 1);
  args.add_int("--warmup", &o.warmup, "untimed batches first", 0);
  args.add_int("--image-size", &o.image_size, "output side", 1);
  args.add_string("--dtype", &o.dtype, "batch dtype", {"f32", "bf16", "u8"});
  args.add_flag("--channels-last", &o.channels_last, "NHWC batches");
  args.add_flag("--no-dct-scaling", &o.no_dct, "always decode at full size (exact PIL pixels)");
  args.add_string("--model", &o.model, "with --train-steps: the ResNet to train", resnet_names());
  args.add_int("--train-steps", &o.train_steps, "training steps fed by the loader (data stall)", 0);
  args.add_int("--threads", &o.threads, "CPU threads of the model with --train-steps", 0);
  args.add_int("--dct-error", &o.dct_error,
               "imagefolder: also compare N training crops decoded DCT-scaled with the same "
               "crops decoded at full size (exact PIL pixels)",
               0);
  args.add_string("--json", &o.json_path, "also write the JSON object to this file", {}, "FILE");
  args.parse(argc, argv);
  if (o.data.rfind("imagefolder:", 0) != 0 && o.data.rfind("packed:", 0) != 0)
    args.fail("--data: '" + o.data + "' is not imagefolder:PATH or packed:PATH");
  if (o.train_steps > 0 && o.model.empty()) args.fail("--train-steps needs --model");
  return o;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

ddp::data::DatasetPtr open_dataset(const Options& o, const ddp::data::ImageTransform& t) {
  const bool packed = o.data.rfind("packed:", 0) == 0;
  std::string path = o.data.substr(packed ? 7 : 12);
  if (std::filesystem::is_directory(path + "/train")) path += "/train";
  if (packed) return std::make_shared<ddp::data::PackedImageDataset>(path, t);
  return std::make_shared<ddp::data::ImageFolderDataset>(path, t);
}

// Note [DCT-scaled decoding]'s difference, measured on the benchmark's own
// photographs: the same plan decoded with the DCT scale the transform picks
// and at full size (equal to torchvision's pixels), as u8.
void measure_dct_error(const Options& o, const ddp::data::ImageFolderDataset& folder,
                       JsonObject& j) {
  ddp::data::ImageTransform t = ddp::data::ImageTransform::imagenet_train(o.image_size);
  t.dtype = ddp::DType::u8;
  const int64_t n = std::min(o.dct_error, folder.size());
  std::vector<uint8_t> a(size_t(3 * t.size * t.size)), b(a.size());
  int max_diff = 0, differing = 0;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t index = i * folder.size() / n;
    const std::string& path = folder.samples()[size_t(index)].path;
    std::ifstream f(path, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), {});
    ddp::data::SampleRng rng(1, 0, index);
    const ddp::data::ImageDims dims = ddp::data::image_dims(bytes, path);
    const ddp::data::CropPlan plan = ddp::data::plan_crop(t, dims.width, dims.height, rng);
    ddp::data::decode_with_plan(bytes, path, t, plan, a.data(), 0);
    ddp::data::decode_with_plan(bytes, path, t, plan, b.data(), 1);
    bool differs = false;
    for (size_t k = 0; k < a.size(); ++k) {
      const int d = std::abs(int(a[k]) - int(b[k]));
      max_diff = std::max(max_diff, d);
      sum += d;
      differs |= d != 0;
    }
    differing += differs;
  }
  const double mean = sum / double(std::max<int64_t>(1, n)) / double(a.size());
  fmt::print("# DCT-scaled vs full-size decode, {} crops of {}: {} decoded reduced; "
             "|difference| max {}, mean {:.3f} (u8 levels, over all pixels)\n",
             n, o.image_size, differing, max_diff, mean);
  j.add("dct_error_crops", n).add("dct_scaled_crops", differing)
      .add("dct_error_max", max_diff).add("dct_error_mean", mean);
}

int run(const Options& o) {
  ddp::data::ImageTransform t = ddp::data::ImageTransform::imagenet_train(o.image_size);
  t.dtype = ddp::dtype_from_name(o.dtype);
  t.layout = o.channels_last ? ddp::data::ImageLayout::hwc : ddp::data::ImageLayout::chw;
  t.dct_scaling = !o.no_dct;
  const ddp::data::DatasetPtr ds = open_dataset(o, t);
  const bool pinned = ddp::cuda::is_available();
  ddp::data::DataLoader loader(ds, {.batch_size = o.batch_size, .shuffle = true, .drop_last = true,
                                    .num_workers = int(o.workers), .seed = 1,
                                    .pin_memory = pinned});
  fmt::print("# bench_data: {}\n# transform: {}\n# workers {}, batch {}, warmup {}, steps {}, "
             "{} batches\n",
             ds->describe(), t.describe(), o.workers, o.batch_size, o.warmup, o.steps,
             pinned ? "pinned" : "pageable (no GPU)");
  DDP_CHECK(loader.size() >= 1, "bench_data: {} has fewer than --batch-size {} images",
            ds->describe(), o.batch_size);
  int64_t epoch = 0;
  loader.start();
  auto next = [&] {
    for (;;) {
      if (auto b = loader.next()) return std::move(*b);
      loader.set_epoch(++epoch);
      loader.start();
    }
  };
  for (int64_t i = 0; i < o.warmup; ++i) next();
  const auto t0 = Clock::now();
  int64_t images = 0;
  for (int64_t i = 0; i < o.steps; ++i) images += next().size();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const double ips = double(images) / seconds;
  fmt::print("{:>12} {:>10} {:>12} {:>14}\n{:>12} {:>10.1f} {:>12.1f} {:>14.1f}\n", "images",
             "seconds", "images/s", "peak_rss_MiB", images, seconds, ips, peak_rss_mib());

  JsonObject j;
  j.add("benchmark", "bench_data")
      .add("libddp_version", DDP_VERSION_STRING)
      .add("data", o.data)
      .add("dataset_size", ds->size())
      .add("workers", o.workers)
      .add("batch_size", o.batch_size)
      .add("warmup", o.warmup)
      .add("steps", o.steps)
      .add("image_size", o.image_size)
      .add("dtype", o.dtype)
      .add("channels_last", o.channels_last)
      .add("dct_scaling", !o.no_dct)
      .add("pinned", pinned)
      .add("images_per_s", ips)
      .add("seconds", seconds);

  if (o.dct_error > 0) {
    auto* folder = dynamic_cast<const ddp::data::ImageFolderDataset*>(ds.get());
    DDP_CHECK(folder != nullptr, "bench_data: --dct-error needs --data imagefolder:PATH");
    measure_dct_error(o, *folder, j);
  }
  if (o.train_steps > 0) {
    // Training steps fed by the loader: the stall is how long next() took.
    const ddp::Device device = pinned ? ddp::Device::cuda(0) : ddp::Device::cpu();
    if (!device.is_cuda() && o.threads > 0) set_cpu_threads(int(o.threads));
    auto model = make_resnet(o.model);
    model->to(device);
    TrainSetup setup;
    setup.model = model;
    setup.loss = [](const ddp::Tensor& out, const ddp::Tensor& y) {
      return ddp::nn::functional::cross_entropy(out, y);
    };
    setup.optimizer = std::make_shared<ddp::optim::SGD>(
        model->parameters(), 0.01, ddp::optim::SGDOptions{.momentum = 0.9});
    setup.device = device;
    double stall = 0, step = 0;
    for (int64_t s = 0; s < o.train_steps; ++s) {
      const auto w0 = Clock::now();
      ddp::data::Batch b = next();
      const double waited = std::chrono::duration<double>(Clock::now() - w0).count();
      setup.batch = {b.input.to(device), b.target.to(device)};
      const double took = time_training(setup, 0, 1).step_s.at(0);
      fmt::print("# train step {}: waited {:.3f} s for data, step {:.3f} s\n", s, waited, took);
      if (s > 0 || o.train_steps == 1) {  // the first step also builds plans
        stall += waited;
        step += took;
      }
    }
    const double n = double(std::max<int64_t>(1, o.train_steps - 1));
    fmt::print("# {}: mean data stall {:.3f} s per step, mean step {:.3f} s\n", o.model,
               stall / n, step / n);
    j.add("model", o.model).add("train_steps", o.train_steps)
        .add("data_stall_s_mean", stall / n).add("train_step_s_mean", step / n);
  }
  j.add("peak_rss_mib", peak_rss_mib());
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path, std::ios::trunc);
    f << j.str() << '\n';
    if (!f.good()) DDP_THROW(IoError, "cannot write '{}'", o.json_path);
  }
  return 0;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  return bench::guarded_main("bench_data", [&] { return bench::run(bench::parse(argc, argv)); });
}
