// gelu (exact form: forward and backward here, kernels in kernels/cpu/gelu.cpp
// and kernels/cuda/gelu.cu; tanh form: the tensor op) and relu.

#include "ddp/nn/functional/activation.h"

#include "cpu/nn_kernels.h"
#include "ddp/autograd/node.h"
#include "ddp/tensor/ops.h"
#include "nn/functional/checks.h"
#include "nn/functional/dense_cuda.h"

namespace ddp::nn::functional {

Tensor gelu(const Tensor& x, const std::string& approximate) {
  const char* op = "gelu";
  detail::check_floating(op, x, "input");
  DDP_CHECK(approximate == "none" || approximate == "tanh",
            "{}: approximate must be \"none\" or \"tanh\", got \"{}\"", op, approximate);
  if (approximate == "tanh") return ddp::gelu(x);

  Tensor xc = x.detach().contiguous();
  Tensor y = Tensor::empty(x.shape(), TensorOptions(x.dtype()).device(x.device()));
  if (x.is_cuda())
    dense_cuda::gelu_erf(xc, y);
  else
    cpu::gelu_erf(xc, y);
  if (autograd::needs_grad({x})) {
    autograd::record(op, {x}, {y}, [xc](const Tensors& g) -> Tensors {
      Tensor dy = g[0].to(xc.dtype()).contiguous();
      Tensor dx = Tensor::empty(xc.shape(), TensorOptions(xc.dtype()).device(xc.device()));
      if (xc.is_cuda())
        dense_cuda::gelu_erf_backward(xc, dy, dx);
      else
        cpu::gelu_erf_backward(xc, dy, dx);
      return {dx};
    });
  }
  return y;
}

Tensor relu(const Tensor& x) { return ddp::relu(x); }

}  // namespace ddp::nn::functional
