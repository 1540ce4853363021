#pragma once
// Conv2d, like torch.nn.Conv2d (zero padding): parameters "weight"
// [out, in / groups, kh, kw] and "bias" [out] (absent with bias = false),
// initialised as torch does: kaiming_uniform_(weight, a = sqrt(5)), bias
// uniform in ±1/sqrt(fan_in). The input may be NCHW or NHWC-strided; the
// output has the input's layout (Note [Channels-last tensors]). The
// computation is nn::functional::conv2d (oneDNN on the CPU, cuDNN on CUDA).

#include <cstdint>
#include <string>

#include "ddp/nn/functional/conv.h"
#include "ddp/nn/module.h"

namespace ddp::nn {

class Conv2d : public UnaryModule {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Int2 kernel_size, Int2 stride = 1,
         Int2 padding = 0, Int2 dilation = 1, int64_t groups = 1, bool bias = true);

  // x: [N, in_channels, H, W]; ShapeError naming this module otherwise.
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) through functional::conv2d_bias_relu: one fused cuDNN
  // kernel on CUDA when no gradient is needed (inference under
  // NoGradGuard); composed and differentiable otherwise.
  Tensor forward_relu(const Tensor& x);
  std::string extra_repr() const override;

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  Int2 kernel_size() const { return kernel_size_; }
  const functional::Conv2dParams& params() const { return params_; }

  Tensor weight, bias;

 private:
  int64_t in_channels_, out_channels_;
  Int2 kernel_size_;
  functional::Conv2dParams params_;
};

}  // namespace ddp::nn
