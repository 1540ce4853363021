// The dense layers and losses on CUDA against the CPU, forward and backward;
// skipped without a GPU.
//
// Error measure: max_i |gpu_i - cpu_i| / max_i |cpu_i| (scaled_max_error).
// The CPU reference runs in f32 on the very inputs the GPU sees (rounded to
// the GPU dtype first), so only the GPU's own rounding counts:
//   f32:  1e-5  (f32 arithmetic in a different order; no TF32)
//   f16:  2e-3  (an output rounding of 2^-11 relative, at most two in a row)
//   bf16: 1e-2  (the same with 2^-8)

#include "ddp/nn/functional/activation.h"
#include "ddp/nn/functional/dropout.h"
#include "ddp/nn/functional/embedding.h"
#include "ddp/nn/functional/layer_norm.h"
#include "ddp/nn/functional/linear.h"
#include "ddp/tensor/cuda.h"
#include "nn/dense_test_util.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;
using Fn = std::function<Tensor(const Tensors&)>;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

double tolerance(DType dt) {
  switch (dt) {
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1e-2;
    default:
      return 1e-5;
  }
}

struct Run {
  Tensor y;
  Tensors grads;  // of the floating inputs, in order (undefined for others)
};

// fn on copies of `inputs` (floating ones converted to dt and made leaves)
// on `device`, then backward from dy (a scalar output takes no dy).
Run run(const Fn& fn, const Tensors& inputs, const Tensor& dy, Device device, DType dt) {
  Tensors in;
  for (const Tensor& x : inputs) {
    Tensor t = x.to(device);
    if (is_floating(x.dtype())) t = t.to(dt).detach().set_requires_grad();
    in.push_back(t);
  }
  Run r;
  r.y = fn(in);
  if (r.y.dim() == 0)
    r.y.backward();
  else
    r.y.backward(dy.to(device).to(r.y.dtype()));
  for (const Tensor& t : in) r.grads.push_back(is_floating(t.dtype()) ? t.grad() : Tensor());
  return r;
}

// fn on the GPU in dt against fn on the CPU in f32 on the same (rounded) values.
void expect_gpu_matches_cpu(const char* what, const Fn& fn, const Tensors& inputs,
                            const Shape& out_shape) {
  Generator gen(77);
  Tensor dy = randn(out_shape, {}, &gen);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(what) + " " + dtype_name(dt));
    Tensors rounded;
    for (const Tensor& x : inputs)
      rounded.push_back(is_floating(x.dtype()) ? x.to(dt).to(DType::f32) : x);
    Tensor dy_rounded = dy.to(dt).to(DType::f32);
    Run cpu = run(fn, rounded, dy_rounded, Device::cpu(), DType::f32);
    Run gpu = run(fn, rounded, dy_rounded, Device::cuda(0), dt);
    EXPECT_TRUE(gpu.y.is_cuda());
    EXPECT_EQ(gpu.y.dtype(), dt);
    EXPECT_CLOSE_TO(gpu.y, cpu.y, tolerance(dt), "output");
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!cpu.grads[i].defined()) continue;
      EXPECT_CLOSE_TO(gpu.grads[i], cpu.grads[i], tolerance(dt),
                      "grad of input " + std::to_string(i));
    }
  }
}

Tensor draw(const Shape& shape, uint64_t seed, double scale = 1.0) {
  Generator gen(seed);
  return randn(shape, {}, &gen) * scale;
}

TEST(DenseGpu, Linear) {
  SKIP_WITHOUT_GPU();
  // Sizes that are not multiples of 8 or 16, a 3-D input, and no bias.
  expect_gpu_matches_cpu("linear", [](const Tensors& t) { return F::linear(t[0], t[1], t[2]); },
                         {draw({3, 7, 33}, 1), draw({19, 33}, 2, 0.2), draw({19}, 3)}, {3, 7, 19});
  expect_gpu_matches_cpu("linear without bias",
                         [](const Tensors& t) { return F::linear(t[0], t[1]); },
                         {draw({64, 128}, 4), draw({96, 128}, 5, 0.1)}, {64, 96});
}

TEST(DenseGpu, LayerNorm) {
  SKIP_WITHOUT_GPU();
  for (int64_t cols : {5, 64, 1000}) {
    expect_gpu_matches_cpu(
        "layer_norm", [cols](const Tensors& t) { return F::layer_norm(t[0], {cols}, t[1], t[2]); },
        {draw({6, cols}, 6, 3.0) + 1.0, draw({cols}, 7), draw({cols}, 8)}, {6, cols});
  }
  expect_gpu_matches_cpu("layer_norm without affine",
                         [](const Tensors& t) {
                           return F::layer_norm(t[0], {4, 5});
                         },
                         {draw({3, 4, 5}, 9)}, {3, 4, 5});
}

TEST(DenseGpu, Activations) {
  SKIP_WITHOUT_GPU();
  for (const char* approximate : {"none", "tanh"})
    expect_gpu_matches_cpu("gelu",
                           [approximate](const Tensors& t) { return F::gelu(t[0], approximate); },
                           {draw({8, 50}, 10, 3.0)}, {8, 50});
  expect_gpu_matches_cpu("relu", [](const Tensors& t) { return F::relu(t[0]); },
                         {draw({8, 50}, 11)}, {8, 50});
}

TEST(DenseGpu, EmbeddingAndLosses) {
  SKIP_WITHOUT_GPU();
  Tensor index = Tensor::from_vector<int64_t>({3, 0, 3, 9, 9, 9}, {2, 3});
  expect_gpu_matches_cpu("embedding", [](const Tensors& t) { return F::embedding(t[0], t[1]); },
                         {index, draw({10, 16}, 12)}, {2, 3, 16});
  Tensor target = Tensor::from_vector<int64_t>({1, 0, -100, 6, 2, 2, 5, 0}, {8});
  for (double smoothing : {0.0, 0.1}) {
    expect_gpu_matches_cpu("cross_entropy",
                           [&](const Tensors& t) {
                             return F::cross_entropy(t[0], target.to(t[0].device()),
                                                     nn::Reduction::mean, smoothing);
                           },
                           {draw({8, 7}, 13, 2.0)}, {});
    expect_gpu_matches_cpu("cross_entropy none",
                           [&](const Tensors& t) {
                             return F::cross_entropy(t[0], target.to(t[0].device()),
                                                     nn::Reduction::none, smoothing);
                           },
                           {draw({8, 7}, 14, 2.0)}, {8});
  }
  expect_gpu_matches_cpu("mse_loss", [](const Tensors& t) { return F::mse_loss(t[0], t[1]); },
                         {draw({5, 6}, 15), draw({5, 6}, 16)}, {});
}

TEST(DenseGpu, DropoutDropsTheSameElementsAsTheCpu) {
  SKIP_WITHOUT_GPU();
  // Philox gives both devices the same numbers for the same seed and offset.
  Tensor x = draw({40, 50}, 17);
  Generator a(5), b(5);
  Tensor cpu = F::dropout(x, 0.3, true, &a);
  Tensor gpu = F::dropout(x.cuda(), 0.3, true, &b);
  EXPECT_TRUE(allclose(gpu.cpu(), cpu, 0, 0));
}

TEST(DenseGpu, ModulesMoveToTheGpu) {
  SKIP_WITHOUT_GPU();
  manual_seed(3);
  nn::Sequential mlp{std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::LayerNorm>(8),
                     std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(8, 3)};
  Tensor x = draw({4, 6}, 18);
  Tensor target = Tensor::from_vector<int64_t>({0, 2, 1, 2}, {4});
  Tensor cpu_loss = nn::CrossEntropyLoss()(mlp(x), target);
  mlp.to(Device::cuda(0));
  Tensor gpu_loss = nn::CrossEntropyLoss()(mlp(x.cuda()), target.cuda());
  EXPECT_NEAR(gpu_loss.item<double>(), cpu_loss.item<double>(), 1e-5);
  gpu_loss.backward();
  for (const Tensor& p : mlp.parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_TRUE(p.grad().is_cuda());
  }
}

}  // namespace
}  // namespace ddp::test
