#include "ddp/nn/conv.h"

#include <fmt/format.h>

#include <cmath>

#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/init.h"
#include "ddp/tensor/ops.h"

namespace ddp::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Int2 kernel_size, Int2 stride,
               Int2 padding, Int2 dilation, int64_t groups, bool with_bias)
    : UnaryModule("Conv2d"),
      in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      params_{stride, padding, dilation, groups} {
  DDP_CHECK(in_channels > 0 && out_channels > 0 && groups > 0,
            "Conv2d: channels and groups must be positive, got in={}, out={}, groups={}",
            in_channels, out_channels, groups);
  DDP_CHECK(in_channels % groups == 0 && out_channels % groups == 0,
            "Conv2d: in_channels ({}) and out_channels ({}) must be divisible by groups ({})",
            in_channels, out_channels, groups);
  DDP_CHECK(kernel_size.h > 0 && kernel_size.w > 0, "Conv2d: kernel_size must be positive, got {}",
            kernel_size.str());
  weight = register_parameter(
      "weight", Tensor::empty({out_channels, in_channels / groups, kernel_size.h, kernel_size.w}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));  // torch's reset_parameters
  Tensor b;
  if (with_bias) {
    b = Tensor::empty({out_channels});
    const double bound = 1.0 / std::sqrt(double(init::calculate_fans(weight).fan_in));
    init::uniform_(b, -bound, bound);
  }
  bias = register_parameter("bias", b);
}

Tensor Conv2d::forward(const Tensor& x) {
  DDP_CHECK_T(ShapeError, x.defined() && x.dim() == 4 && x.size(1) == in_channels_,
              "{}: expected an input [N, {}, H, W], got {}", describe(), in_channels_,
              x.defined() ? x.describe() : "an undefined tensor");
  return functional::conv2d(x, weight, bias, params_, describe());
}

Tensor Conv2d::forward_relu(const Tensor& x) {
  DDP_CHECK_T(ShapeError, x.defined() && x.dim() == 4 && x.size(1) == in_channels_,
              "{}: expected an input [N, {}, H, W], got {}", describe(), in_channels_,
              x.defined() ? x.describe() : "an undefined tensor");
  return functional::conv2d_bias_relu(x, weight, bias, params_, describe());
}

std::string Conv2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels_, out_channels_,
                              kernel_size_.str(), params_.stride.str());
  if (params_.padding != Int2(0)) s += fmt::format(", padding={}", params_.padding.str());
  if (params_.dilation != Int2(1)) s += fmt::format(", dilation={}", params_.dilation.str());
  if (params_.groups != 1) s += fmt::format(", groups={}", params_.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace ddp::nn
