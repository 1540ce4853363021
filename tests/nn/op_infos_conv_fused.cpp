// The op registry's entry for conv2d_bias_relu, the inference fusion of
// Note [Fused conv + bias + ReLU]. Not differentiable here on purpose: with
// inputs that require grad the op composes conv2d and relu (conv2d's entry
// covers that), so only grad-free inputs reach the fused cuDNN kernel.
// Registered from here, as the tensor layer may not see nn: see Note
// [Registering ops from higher layers] in tests/tensor/op_registry.h.

#include "ddp/nn/cudnn.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/tensor/ops.h"
#include "tensor/op_registry.h"

namespace ddp::nn::functional {
namespace {

using namespace op_samples;

// As conv2d's entry: sums over C·KH·KW.
const std::map<DType, double> kConvTolerance = {
    {DType::f64, 1e-10}, {DType::f32, 1e-4}, {DType::f16, 1e-2}, {DType::bf16, 4e-2}};

// x [N, C, H, W], w [O, C, K, K], b [O].
SampleFn fused_sample(Shape x, Shape w) {
  return [=](DType dt, Device dev, Generator& gen) {
    return Tensors{signed_values(x, dt, dev, gen), signed_values(w, dt, dev, gen),
                   signed_values({w[0]}, dt, dev, gen)};
  };
}

Tensors run_fused(const Tensors& in) {
  cudnn::AllowTf32Guard no_tf32(false);  // f32 to f32 rounding (Note [cuDNN TF32])
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  const int64_t pad = w.size(2) / 2;
  Tensor xl = to_channels_last(x), wl = to_channels_last(w);
  return {conv2d_bias_relu(x, w, b, {.padding = pad}),
          // a channels-last model: x, w and y NHWC
          conv2d_bias_relu(xl, wl, b, {.padding = pad}).contiguous(),
          // no bias, strided
          conv2d_bias_relu(xl, wl, {}, {.stride = 2}).contiguous()};
}

void add_fused(std::vector<OpInfo>& ops) {
  OpInfo op = make("conv2d_bias_relu", kFloats, fused_sample({2, 4, 7, 6}, {6, 4, 3, 3}),
                   run_fused);
  // A ResNet-50 stage's 3×3 convolution and a 1×1 projection width.
  op.cuda_samples = {fused_sample({8, 64, 56, 56}, {64, 64, 3, 3}),
                     fused_sample({8, 256, 28, 28}, {128, 256, 1, 1})};
  op.cuda_scaled_tolerance = kConvTolerance;
  auto x = [](Device d) { return zeros({1, 4, 5, 5}, d); };
  auto w = [](Device d) { return zeros({2, 4, 3, 3}, d); };
  op.bad_inputs = {
      bad_input<ShapeError>("a 3-D input", "conv2d_bias_relu: expected a 4-D input",
                            [=](Device d) { conv2d_bias_relu(zeros({4, 5, 5}, d), w(d)); }),
      bad_input<ShapeError>("a bias of the wrong size", "conv2d_bias_relu: expected a bias [2]",
                            [=](Device d) { conv2d_bias_relu(x(d), w(d), zeros({3}, d)); }),
      bad_input<ShapeError>("channels that do not match the weight", "expected input",
                            [=](Device d) { conv2d_bias_relu(zeros({1, 3, 5, 5}, d), w(d)); }),
      bad_input<DTypeError>("an f64 bias for f32 tensors", "share one floating dtype",
                            [=](Device d) {
                              conv2d_bias_relu(x(d), w(d), zeros({2}, d, DType::f64));
                            }),
      bad_input<ValueError>("stride 0", "stride and dilation must be positive",
                            [=](Device d) { conv2d_bias_relu(x(d), w(d), {}, {.stride = 0}); })};
  ops.push_back(std::move(op));
}

const OpInfoRegistrar kFusedConvOps("nn/functional/conv_fused", add_fused);

}  // namespace
}  // namespace ddp::nn::functional
