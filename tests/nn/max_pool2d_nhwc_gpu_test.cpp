// max_pool2d on channels-last CUDA tensors (Note [Channels-last max_pool2d]):
// the CUDA NHWC kernels pick the CPU kernels' argmax (NaNs and ties
// included), give the same values and gradients, keep NHWC and convert
// nothing (Note [Layout conversion count]). Skipped without a GPU.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/layout_conversions.h"
#include "ddp/nn/functional/pooling.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

// Integers in [0, 8) with every seventh value NaN: ties and NaNs in most windows.
Tensor tied_input(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> v = values(uniform(s, 0.0, 8.0, TensorOptions(DType::f32), &gen));
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 7 == 0 ? NAN : std::floor(v[i]);
  return Tensor::from_vector(v, s, TensorOptions(DType::f32));
}

void expect_same(const Tensor& got, const Tensor& want, const char* what) {
  const std::vector<double> g = values(got.cpu()), w = values(want.cpu());
  ASSERT_EQ(g.size(), w.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]))) && bad++ < 5)
      ADD_FAILURE() << what << " differs at " << i << ": " << g[i] << " vs " << w[i];
}

TEST(MaxPool2dNhwcGpu, ResNetStemMatchesTheCpuWithoutConversions) {
  SKIP_WITHOUT_GPU();
  struct Case {
    Shape shape;
    Int2 kernel, stride, padding, dilation;
  };
  for (const Case& c : {Case{{8, 64, 112, 112}, 3, 2, 1, 1},  // the ImageNet ResNet stem
                        Case{{2, 5, 9, 11}, {3, 2}, {1, 2}, {1, 1}, {2, 1}}}) {
    Tensor x_cpu = F::to_channels_last(tied_input(c.shape, 3));
    Tensor x_cpu_leaf = x_cpu.detach().set_requires_grad();
    Tensor x_gpu = x_cpu.to(Device::cuda(0)).detach().set_requires_grad();
    ASSERT_TRUE(F::is_channels_last(x_gpu));
    const int64_t before = F::layout_conversion_count();
    Tensor y_gpu = F::max_pool2d(x_gpu, c.kernel, c.stride, c.padding, c.dilation);
    EXPECT_TRUE(F::is_channels_last(y_gpu));
    // dy broadcast from one value per channel: read through its zero strides.
    Tensor dy = arange(c.shape[1], TensorOptions(DType::f32))
                    .reshape({1, c.shape[1], 1, 1})
                    .expand(y_gpu.shape());
    y_gpu.backward(dy.to(Device::cuda(0)));
    EXPECT_EQ(F::layout_conversion_count(), before) << "the CUDA NHWC path converted";
    EXPECT_TRUE(F::is_channels_last(x_gpu.grad()));
    Tensor y_cpu = F::max_pool2d(x_cpu_leaf, c.kernel, c.stride, c.padding, c.dilation);
    y_cpu.backward(dy);
    expect_same(y_gpu.contiguous(), y_cpu.contiguous(), "output");
    // Small sums of equal integers: exact in any order.
    expect_same(x_gpu.grad().contiguous(), x_cpu_leaf.grad().contiguous(), "gradient");
  }
}

}  // namespace
}  // namespace ddp::test
