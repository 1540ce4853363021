// bench_resnet: ResNet training throughput on one device (issue 7).
//
//   bench_resnet --model resnet50 --batch-size 128 --amp bf16 --channels-last --json r.json
//   bench_resnet --model resnet20 --device cpu --batch-size 64 --threads 2
//   bench_resnet --model resnet50 --device cpu --batch-size 8 --threads 2 --eval
//
// Times `--steps` training steps (forward, cross-entropy, backward, SGD)
// (with --eval: inference, the forward and loss of the model in eval mode
// under no-grad) after `--warmup` untimed ones on a synthetic batch made on the device
// beforehand, and reports images/s from the median step, the spread, peak
// memory, the FLOPs per image (counted from the model's layers, Note
// [Benchmark FLOPs]) and the MFU they imply. Usage, output fields and
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
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/generator.h"

namespace bench {
namespace {

struct Options : CommonOptions {
  std::string model = "resnet50";
  int64_t batch_size = 32;
  int64_t image_size = 0;  // 0: the model's own
  bool channels_last = false;
  bool eval = false;
};

Options parse(int argc, char** argv, ddp::Device& device) {
  Options o;
  o.warmup = 5, o.steps = 20;
  ArgParser args("bench_resnet",
                 "Times ResNet training steps (forward, loss, backward, SGD) on one device,\n"
                 "on a synthetic batch; reports images/s, step-time spread, peak memory and MFU.");
  args.add_string("--model", &o.model, "the ResNet", resnet_names());
  args.add_int("--batch-size", &o.batch_size, "images per step", 1);
  args.add_int("--image-size", &o.image_size,
               "image side (default 224 for resnet18-101, 32 for resnet20/32/56)", 1);
  args.add_flag("--channels-last", &o.channels_last, "the model and its images channels-last (NHWC; tensor cores on GPUs)");
  args.add_flag("--eval", &o.eval,
                "time inference instead: forward + loss in eval mode under no-grad (no backward, "
                "no optimizer)");
  add_common_options(args, o, "image");
  args.parse(argc, argv);
  device = common_device(args, o);
  if (o.image_size == 0) o.image_size = default_image_size(o.model);
  return o;
}

int run(const Options& o, const ddp::Device& device) {
  check_device(device);
  const int threads = device.is_cuda() ? 0 : set_cpu_threads(int(o.threads));
  ddp::manual_seed(1234);
  std::shared_ptr<ddp::nn::models::ResNet> model = make_resnet(o.model);
  const int64_t macs = resnet_forward_macs(*model, o.image_size);  // before any time is spent
  TrainSetup setup;
  if (!o.dry_run) {  // --dry-run: the header needs only the MACs
    model->to(device);
    // A channels-last model's weights are NHWC too, so neither cuDNN nor
    // oneDNN copies anything (Note [cuDNN convolution], Note [oneDNN layouts]).
    if (o.channels_last) model->to(ddp::MemoryFormat::channels_last);
    setup.model = model;
    setup.loss = [](const ddp::Tensor& out, const ddp::Tensor& y) {
      return ddp::nn::functional::cross_entropy(out, y);
    };
    setup.optimizer = std::make_shared<ddp::optim::SGD>(
        model->parameters(), 0.01, ddp::optim::SGDOptions{.momentum = 0.9, .weight_decay = 1e-4});
    setup.batch = synthetic_images(o.batch_size, o.image_size, num_classes(o.model), device, 99);
    if (o.channels_last) setup.batch.x = ddp::nn::functional::to_channels_last(setup.batch.x);
    setup.device = device;
    setup.amp = o.amp;
    setup.eval = o.eval;
    if (o.eval) model->eval();
  }

  BenchInfo info;
  info.program = "bench_resnet";
  info.model = o.model;
  info.device = device;
  info.threads = threads;
  info.amp = o.amp;
  info.batch_size = o.batch_size;
  info.warmup = o.warmup;
  info.steps = o.steps;
  info.num_params = model->num_parameters();
  info.unit = "image";
  info.samples_per_step = o.batch_size;
  const int passes = o.eval ? 1 : 3;  // forward only, or forward + two backward passes
  info.flops_per_sample = 2.0 * passes * double(macs);
  info.flops_how = fmt::format(
      "{} x 2 x {:.4g} GMAC forward, convolutions and fc counted from the model at {}x{}", passes,
      1e-9 * double(macs), o.image_size, o.image_size);
  info.step_how =
      o.eval ? "eval mode, no-grad: forward + cross-entropy (no backward, no optimizer)"
             : "forward + cross-entropy + backward + SGD (momentum 0.9, weight decay 1e-4; "
               "multi-tensor)";
  info.model_lines.push_back(fmt::format("images 3x{}x{}, {} classes, {}", o.image_size,
                                         o.image_size, num_classes(o.model),
                                         o.channels_last ? "channels-last (NHWC)" : "NCHW"));
  info.model_json.add("image_size", o.image_size).add("channels_last", o.channels_last)
      .add("eval", o.eval);
  info.peak_tflops = o.peak_tflops;
  info.json_path = o.json_path;
  info.dry_run = o.dry_run;
  return run_and_report(info, setup);
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  return bench::guarded_main("bench_resnet", [&] {
    ddp::Device device;
    const bench::Options o = bench::parse(argc, argv, device);
    return bench::run(o, device);
  });
}
