#include "ddp/nn/layer_norm.h"

#include "ddp/nn/functional/layer_norm.h"

namespace ddp::nn {

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine)
    : UnaryModule("LayerNorm"), shape_(std::move(normalized_shape)), eps_(eps) {
  DDP_CHECK(!shape_.empty(), "LayerNorm: normalized_shape must have at least one dim");
  for (int64_t d : shape_)
    DDP_CHECK(d >= 0, "LayerNorm: normalized_shape {} has a negative dim", shape_str(shape_));
  if (elementwise_affine) {
    weight = register_parameter("weight", Tensor::ones(shape_));
    bias = register_parameter("bias", Tensor::zeros(shape_));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  const int64_t k = int64_t(shape_.size());
  bool ok = x.defined() && x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(x.dim() - k + i) == shape_[size_t(i)];
  DDP_CHECK_T(ShapeError, ok, "{}: expected an input whose last dims are {}, got {}", describe(),
              shape_str(shape_), x.defined() ? x.describe() : "an undefined tensor");
  return functional::layer_norm(x, shape_, weight, bias, eps_);
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", shape_str(shape_), eps_,
                     weight.defined());
}

}  // namespace ddp::nn
