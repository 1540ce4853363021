// The op registry's entries for nn::functional::batch_norm_add_relu (Note
// [BatchNorm + add + ReLU fusion]), training and evaluation, NCHW and NHWC,
// with and without a residual. The CUDA samples are ResNet-50 sized, so the
// CPU-vs-CUDA comparison reaches the cuDNN graphs (Note [cuDNN batch norm
// graphs]) in f32/f16/bf16 and the legacy fallback in f64. Registered from
// here: see Note [Registering ops from higher layers] in
// tests/tensor/op_registry.h.

#include "ddp/nn/functional/batch_norm.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/tensor/ops.h"
#include "tensor/op_registry.h"

namespace ddp::nn::functional {
namespace {

using namespace op_samples;

const std::map<DType, double> kNormTolerance = {
    {DType::f64, 1e-10}, {DType::f32, 1e-4}, {DType::f16, 4e-3}, {DType::bf16, 2e-2}};

// x [N, C, H, W]; running mean, running var (positive), weight, bias [C];
// residual like x, at least 16 away from zero. Why: where bn(x) + r lies
// within rounding of zero, the ReLU's mask may differ between two correct
// implementations (a half-precision one rounds bn(x) before the add, the f32
// reference does not), and each flipped element moves the gradient by a
// whole dy (the first GPU run saw exactly this). With |r| ≥ 16 > |bn(x)| (at
// most (2 + 2)/√0.5 · 2 + 2 ≈ 13.3 in evaluation, from these draws) the
// sign of the sum is the residual's, so the masks agree, and half of them
// are still zero.
SampleFn fused_sample(Shape x) {
  return [=](DType dt, Device dev, Generator& gen) {
    const int64_t c = x[1];
    Tensors in{signed_values(x, dt, dev, gen),   signed_values({c}, dt, dev, gen),
               positive_values({c}, dt, dev, gen), signed_values({c}, dt, dev, gen),
               signed_values({c}, dt, dev, gen),   signed_values(x, dt, dev, gen)};
    const Tensor r = in[5];
    in[5] = where(lt(r, 0.0), r - 16.0, r + 16.0);
    return in;
  };
}

// NCHW and NHWC, with the residual and without; running statistics are
// updated on copies, so every call sees the sample's.
Tensors run_fused(const Tensors& in, bool training) {
  const Tensor &x = in[0], &w = in[3], &b = in[4], &r = in[5];
  Tensors out;
  for (bool nhwc : {false, true}) {
    Tensor xi = nhwc ? to_channels_last(x) : x, ri = nhwc ? to_channels_last(r) : r;
    for (const Tensor& residual : {ri, Tensor()}) {
      Tensor rm = in[1].detach().clone(), rv = in[2].detach().clone();
      out.push_back(batch_norm_add_relu(xi, rm, rv, w, b, residual, training).contiguous());
      if (training && !residual.defined()) out.insert(out.end(), {rm, rv});
    }
  }
  return out;
}

std::vector<BadInputCase> fused_bad_inputs() {
  auto zeros = [](const Shape& s, Device d) { return Tensor::zeros(s, opts(DType::f32, d)); };
  return {
      bad_input<ShapeError>("a residual of another shape",
                            "batch_norm_add_relu: the residual must have the input's shape",
                            [=](Device d) {
                              batch_norm_add_relu(zeros({2, 3, 4}, d), {}, {}, {}, {},
                                                  zeros({2, 3, 5}, d), true);
                            }),
      bad_input<ShapeError>("a 1-D input", "batch_norm_add_relu: expected an input [N, C, ...]",
                            [=](Device d) {
                              batch_norm_add_relu(zeros({3}, d), {}, {}, {}, {}, {}, true);
                            }),
      bad_input<ValueError>("no running statistics in eval", "running statistics are needed",
                            [=](Device d) {
                              batch_norm_add_relu(zeros({2, 3, 4}, d), {}, {}, {}, {}, {}, false);
                            })};
}

void add_fused_batch_norm(std::vector<OpInfo>& ops) {
  for (bool training : {true, false}) {
    // The outputs y only: the running statistics move with x but carry no
    // gradient, so gradcheck must not see them (their own entry below).
    OpInfo op = make(training ? "batch_norm_add_relu_train" : "batch_norm_add_relu_eval",
                     kFloats, fused_sample({4, 3, 5, 4}),
                     [training](const Tensors& in) {
                       Tensors out = run_fused(in, training);
                       Tensors ys;
                       for (size_t i = 0; i < out.size(); ++i)
                         if (out[i].dim() == 4) ys.push_back(out[i]);
                       return ys;
                     },
                     {0, 3, 4, 5});
    // ResNet-50's layer1 end (256 channels at 56×56) and a narrower one.
    op.cuda_samples = {fused_sample({8, 256, 56, 56}), fused_sample({32, 64, 28, 28})};
    op.cuda_scaled_tolerance = kNormTolerance;
    op.bad_inputs = fused_bad_inputs();
    ops.push_back(std::move(op));
  }
  OpInfo stats = make("batch_norm_add_relu_running_stats", kFloats, fused_sample({4, 3, 5, 4}),
                      [](const Tensors& in) {
                        Tensors out = run_fused(in, true), stats;
                        for (const Tensor& t : out)
                          if (t.dim() == 1) stats.push_back(t);
                        return stats;
                      });
  stats.cuda_samples = {fused_sample({8, 256, 56, 56})};
  stats.cuda_scaled_tolerance = kNormTolerance;
  stats.bad_inputs = {bad_input<ShapeError>(
      "running statistics of the wrong size", "per-channel tensors must be [3]", [](Device d) {
        Tensor x = Tensor::zeros({2, 3, 4}, opts(DType::f32, d)), r = Tensor::zeros({2}, opts(DType::f32, d));
        batch_norm_add_relu(x, r, r, {}, {}, x, true);
      })};
  ops.push_back(std::move(stats));
}

const OpInfoRegistrar kFusedBatchNormOps("nn/functional/batch_norm_fused", add_fused_batch_norm);

}  // namespace
}  // namespace ddp::nn::functional
