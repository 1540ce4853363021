#pragma once
// nn::LayerNorm, like torch.nn.LayerNorm: normalises over the trailing
// normalized_shape dims; see ddp/nn/functional/layer_norm.h for the kernels.

#include "ddp/nn/module.h"

namespace ddp::nn {

class LayerNorm : public UnaryModule {
 public:
  // With elementwise_affine: weight (ones) and bias (zeros) of shape
  // normalized_shape; otherwise neither is registered (as in torch, where
  // both are None).
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine) {}
  // ShapeError naming this module when x's trailing dims differ.
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const Shape& normalized_shape() const { return shape_; }
  double eps() const { return eps_; }

  Tensor weight, bias;  // undefined without elementwise_affine

 private:
  Shape shape_;
  double eps_;
};

}  // namespace ddp::nn
