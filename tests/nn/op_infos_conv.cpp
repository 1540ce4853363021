// The op registry's entries for the image ops of nn::functional: conv2d,
// to_channels_last, batch_norm (training and eval), max_pool2d and
// adaptive_avg_pool2d. Each runs in NCHW and NHWC (Note [Channels-last
// tensors]); outputs are made contiguous for the comparison. Registered
// from here, as the tensor layer may not see nn: see Note [Registering ops
// from higher layers] in tests/tensor/op_registry.h.

#include "ddp/nn/cudnn.h"
#include "ddp/nn/functional/batch_norm.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/pooling.h"
#include "ddp/tensor/ops.h"
#include "tensor/op_registry.h"

namespace ddp::nn::functional {
namespace {

using namespace op_samples;

// Long sums (convolutions over C·KH·KW, weight gradients over N·OH·OW):
// scaled-error bounds as tests/nn/conv_gpu_test.cpp's, gradients included.
const std::map<DType, double> kConvTolerance = {
    {DType::f64, 1e-10}, {DType::f32, 1e-4}, {DType::f16, 1e-2}, {DType::bf16, 4e-2}};
const std::map<DType, double> kNormTolerance = {
    {DType::f64, 1e-10}, {DType::f32, 1e-4}, {DType::f16, 4e-3}, {DType::bf16, 2e-2}};

Tensor contig(const Tensor& t) { return t.contiguous(); }

// x [N, C, H, W]; w [O, C/2, K, K] (groups 2) and b [O]; w1 [O1, C, K1, K1].
SampleFn conv_sample(Shape x, Shape w, Shape w1) {
  return [=](DType dt, Device dev, Generator& gen) {
    return Tensors{signed_values(x, dt, dev, gen), signed_values(w, dt, dev, gen),
                   signed_values({w[0]}, dt, dev, gen), signed_values(w1, dt, dev, gen)};
  };
}

// The same with the weights channels-last (NHWC strides), as
// Module::to(MemoryFormat::channels_last) leaves them: CUDA describes them
// as they are (Note [cuDNN convolution]), against NCHW and NHWC inputs.
SampleFn conv_sample_nhwc_weights(Shape x, Shape w, Shape w1) {
  SampleFn base = conv_sample(x, w, w1);
  return [=](DType dt, Device dev, Generator& gen) {
    Tensors t = base(dt, dev, gen);
    t[1] = to_channels_last(t[1]);
    t[3] = to_channels_last(t[3]);
    return t;
  };
}

Tensors run_conv(const Tensors& in) {
  // f32 to f32 rounding: no TF32 on CUDA (Note [cuDNN TF32]).
  cudnn::AllowTf32Guard no_tf32(false);
  const Tensor &x = in[0], &w = in[1], &b = in[2], &w1 = in[3];
  const int64_t groups = x.size(1) / w.size(1), pad = w.size(2) / 2;
  Tensor xl = to_channels_last(x);
  return {conv2d(x, w, b, {.padding = pad, .groups = groups}),
          contig(conv2d(xl, w, b, {.stride = 2, .padding = {pad, 0}, .dilation = {1, 2},
                                   .groups = groups})),
          conv2d(x, w1, {}, {.stride = {1, 2}}), contig(conv2d(xl, w1, {}, {.stride = 2}))};
}

void add_conv(std::vector<OpInfo>& ops) {
  OpInfo op = make("conv2d", kFloats, conv_sample({2, 4, 7, 6}, {6, 2, 3, 3}, {3, 4, 2, 2}),
                   run_conv, {0, 1, 2, 3});
  // A ResNet-50 stage: 3×3 convolutions on 56×56, and a 1×1 projection.
  op.cuda_samples = {conv_sample({8, 64, 56, 56}, {64, 32, 3, 3}, {128, 64, 1, 1}),
                     conv_sample_nhwc_weights({8, 64, 56, 56}, {64, 32, 3, 3}, {128, 64, 1, 1})};
  op.cuda_scaled_tolerance = kConvTolerance;
  auto x = [](Device d) { return zeros({1, 4, 5, 5}, d); };
  auto w = [](Device d) { return zeros({2, 4, 3, 3}, d); };
  op.bad_inputs = {
      bad_input<ShapeError>("a 3-D input", "conv2d: expected a 4-D input",
                            [=](Device d) { conv2d(zeros({4, 5, 5}, d), w(d)); }),
      bad_input<ShapeError>("channels that do not match the weight", "conv2d: expected input",
                            [=](Device d) { conv2d(zeros({1, 3, 5, 5}, d), w(d)); }),
      bad_input<ShapeError>("a bias of the wrong size", "conv2d: expected a bias [2]",
                            [=](Device d) { conv2d(x(d), w(d), zeros({3}, d)); }),
      bad_input<ShapeError>("a kernel larger than the input", "is too small for kernel",
                            [=](Device d) { conv2d(zeros({1, 4, 2, 2}, d), w(d)); }),
      bad_input<ValueError>("stride 0", "stride and dilation must be positive",
                            [=](Device d) { conv2d(x(d), w(d), {}, {.stride = 0}); }),
      bad_input<ValueError>("negative padding", "padding non-negative",
                            [=](Device d) { conv2d(x(d), w(d), {}, {.padding = -1}); }),
      bad_input<ShapeError>("groups that do not divide the channels", "groups=3",
                            [=](Device d) { conv2d(x(d), w(d), {}, {.groups = 3}); }),
      bad_input<DTypeError>("an f64 weight for an f32 input", "share one floating dtype",
                            [=](Device d) { conv2d(x(d), zeros({2, 4, 3, 3}, d, DType::f64)); }),
      bad_input<DTypeError>("integer tensors", "share one floating dtype", [=](Device d) {
        conv2d(zeros({1, 4, 5, 5}, d, DType::i64), zeros({2, 4, 3, 3}, d, DType::i64));
      })};
  ops.push_back(std::move(op));

  OpInfo cl = make(
      "to_channels_last", kFloats,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_values({2, 3, 4, 5}, dt, dev, gen),
                       signed_values({2, 1, 3, 4}, dt, dev, gen)};
      },
      [](const Tensors& in) {
        // NHWC element order, made visible by viewing the strides as [N, H, W, C].
        auto nhwc = [](const Tensor& t) { return contig(to_channels_last(t).permute({0, 2, 3, 1})); };
        return Tensors{nhwc(in[0]), nhwc(in[1]), contig(to_channels_last(to_channels_last(in[0])))};
      },
      {0, 1});
  cl.bad_inputs = {bad_input<ShapeError>("a 3-D tensor", "to_channels_last: expected a 4-D",
                                         [](Device d) { to_channels_last(zeros({3, 4, 5}, d)); })};
  ops.push_back(std::move(cl));
}

// x [N, C, H, W]; running mean [C], running var [C] (positive), weight, bias.
SampleFn norm_sample(Shape x) {
  return [=](DType dt, Device dev, Generator& gen) {
    const int64_t c = x[1];
    return Tensors{signed_values(x, dt, dev, gen), signed_values({c}, dt, dev, gen),
                   positive_values({c}, dt, dev, gen), signed_values({c}, dt, dev, gen),
                   signed_values({c}, dt, dev, gen)};
  };
}

std::vector<BadInputCase> batch_norm_bad_inputs(bool training) {
  auto c3 = [](Device d) { return zeros({3}, d); };
  std::vector<BadInputCase> cases = {
      bad_input<ShapeError>("a 1-D input", "batch_norm: expected an input [N, C, ...]",
                            [=](Device d) {
                              batch_norm(zeros({3}, d), c3(d), c3(d), {}, {}, training);
                            }),
      bad_input<ShapeError>("a weight of the wrong size", "per-channel tensors must be [3]",
                            [=](Device d) {
                              batch_norm(zeros({2, 3, 4}, d), c3(d), c3(d), zeros({4}, d), {},
                                         training);
                            }),
      bad_input<DTypeError>("an integer input", "batch_norm: expected a floating input",
                            [=](Device d) {
                              batch_norm(zeros({2, 3, 4}, d, DType::i64), c3(d), c3(d), {}, {},
                                         training);
                            })};
  if (training)
    cases.push_back(bad_input<ValueError>(
        "one value per channel", "expected more than 1 value per channel when training",
        [=](Device d) { batch_norm(zeros({1, 3, 1, 1}, d), c3(d), c3(d), {}, {}, true); }));
  else
    cases.push_back(bad_input<ValueError>(
        "no running statistics", "running statistics are needed",
        [=](Device d) { batch_norm(zeros({2, 3, 4}, d), {}, {}, {}, {}, false); }));
  return cases;
}

void add_batch_norm(std::vector<OpInfo>& ops) {
  // Training: batch statistics. The running statistics it updates depend on
  // x without a gradient, so they are a separate, non-differentiable entry
  // (gradcheck would see them move with x). Updates go to copies, so every
  // call sees the sample's statistics.
  auto train_outputs = [](const Tensors& in, bool stats) {
    const Tensor &x = in[0], &w = in[3], &b = in[4];
    Tensors out;
    for (const Tensor& xin : {x, to_channels_last(x)}) {
      Tensor rm = in[1].detach().clone(), rv = in[2].detach().clone();
      Tensor y = contig(batch_norm(xin, rm, rv, w, b, true, 0.1, 1e-5));
      if (stats) out.insert(out.end(), {rm, rv});
      else out.push_back(y);
    }
    if (stats) return out;
    // [N·H·W, C] without running statistics or affine parameters.
    Tensor rows = x.permute({0, 2, 3, 1}).reshape({-1, x.size(1)});
    out.push_back(batch_norm(rows, {}, {}, {}, {}, true, 0.1, 1e-3));
    return out;
  };
  OpInfo train = make("batch_norm_train", kFloats, norm_sample({4, 3, 5, 4}),
                      [=](const Tensors& in) { return train_outputs(in, false); }, {0, 3, 4});
  train.cuda_samples = {norm_sample({32, 64, 56, 56})};
  train.cuda_scaled_tolerance = kNormTolerance;
  train.bad_inputs = batch_norm_bad_inputs(true);
  ops.push_back(std::move(train));

  OpInfo stats = make("batch_norm_running_stats", kFloats, norm_sample({4, 3, 5, 4}),
                      [=](const Tensors& in) { return train_outputs(in, true); });
  stats.cuda_samples = {norm_sample({32, 64, 56, 56})};
  stats.cuda_scaled_tolerance = kNormTolerance;
  stats.bad_inputs = {bad_input<ShapeError>(
      "running statistics of the wrong size", "per-channel tensors must be [3]", [](Device d) {
        Tensor r = zeros({2}, d);
        batch_norm(zeros({2, 3, 4}, d), r, r, {}, {}, true);
      })};
  ops.push_back(std::move(stats));

  OpInfo eval = make(
      "batch_norm_eval", kFloats, norm_sample({4, 3, 5, 4}),
      [](const Tensors& in) {
        const Tensor &x = in[0], &rm = in[1], &rv = in[2], &w = in[3], &b = in[4];
        Tensor x3 = x.reshape({x.size(0), x.size(1), -1});
        return Tensors{batch_norm(x, rm, rv, w, b, false),
                       contig(batch_norm(to_channels_last(x), rm, rv, w, b, false)),
                       batch_norm(x3, rm, rv, {}, {}, false, 0.1, 1e-3)};
      },
      {0, 3, 4});
  eval.cuda_samples = {norm_sample({32, 64, 56, 56})};
  eval.cuda_scaled_tolerance = kNormTolerance;
  eval.bad_inputs = batch_norm_bad_inputs(false);
  ops.push_back(std::move(eval));
}

SampleFn image_sample(Shape x) {
  return [=](DType dt, Device dev, Generator& gen) { return Tensors{signed_values(x, dt, dev, gen)}; };
}

void add_pooling(std::vector<OpInfo>& ops) {
  OpInfo max_pool = make(
      "max_pool2d", kFloats, image_sample({2, 3, 7, 6}),
      [](const Tensors& in) {
        const Tensor& x = in[0];
        return Tensors{max_pool2d(x, 2, 2), contig(max_pool2d(to_channels_last(x), 3, 2, 1)),
                       max_pool2d(x, {3, 2}, {1, 2}, {1, 1}, {1, 2})};
      },
      {0});
  max_pool.cuda_samples = {image_sample({8, 64, 112, 112})};  // the ResNet stem's pool
  max_pool.cuda_scaled_tolerance = kNormTolerance;
  auto x = [](Device d) { return zeros({1, 2, 6, 6}, d); };
  max_pool.bad_inputs = {
      bad_input<ShapeError>("a 3-D input", "max_pool2d: expected a 4-D input",
                            [](Device d) { max_pool2d(zeros({2, 6, 6}, d), 2, 2); }),
      bad_input<ValueError>("padding over half the kernel", "padding at most half the kernel",
                            [=](Device d) { max_pool2d(x(d), 2, 2, 2); }),
      bad_input<ValueError>("stride 0", "stride and dilation must be positive",
                            [=](Device d) { max_pool2d(x(d), 2, 0); }),
      bad_input<ShapeError>("a kernel larger than the input", "is too small for kernel",
                            [=](Device d) { max_pool2d(x(d), 7, 1); }),
      bad_input<DTypeError>("an integer input", "expected a floating input",
                            [](Device d) { max_pool2d(zeros({1, 2, 6, 6}, d, DType::i64), 2, 2); })};
  ops.push_back(std::move(max_pool));

  // Average pooling: output 1×1 is a mean; other sizes torch's overlapping
  // adaptive windows (7 → 3 and 6 → 4 do not divide).
  OpInfo avg = make(
      "adaptive_avg_pool2d", kFloats, image_sample({2, 3, 7, 6}),
      [](const Tensors& in) {
        const Tensor& x = in[0];
        return Tensors{adaptive_avg_pool2d(x, 1), adaptive_avg_pool2d(x, {3, 4}),
                       contig(adaptive_avg_pool2d(to_channels_last(x), 2))};
      },
      {0});
  avg.cuda_samples = {image_sample({32, 2048, 7, 7})};  // the ResNet-50 head
  avg.cuda_scaled_tolerance = kNormTolerance;
  avg.bad_inputs = {
      bad_input<ValueError>("output size 0", "output_size must be positive",
                            [=](Device d) { adaptive_avg_pool2d(x(d), 0); }),
      bad_input<ShapeError>("a 2-D input", "adaptive_avg_pool2d: expected a 4-D input",
                            [](Device d) { adaptive_avg_pool2d(zeros({6, 6}, d), 2); }),
      bad_input<DTypeError>("an integer input", "expected a floating input", [](Device d) {
        adaptive_avg_pool2d(zeros({1, 2, 6, 6}, d, DType::i32), 2);
      })};
  ops.push_back(std::move(avg));
}

void add_image_op_infos(std::vector<OpInfo>& ops) {
  add_conv(ops);
  add_batch_norm(ops);
  add_pooling(ops);
}

const OpInfoRegistrar kImageOps("nn/functional/image", add_image_op_infos);

}  // namespace
}  // namespace ddp::nn::functional
