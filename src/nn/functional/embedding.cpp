// embedding: a row gather from weight, forward and backward as kernel ops
// (kernels/cpu/embedding.cpp, kernels/cuda/embedding.cu). No host
// synchronisation: the CPU kernels check the indices as they read them, the
// CUDA kernels defer the check to the next synchronisation point (Note
// [Deferred device errors] in src/tensor/device_error_cuda.cpp); the
// gradient is deterministic (Note [Deterministic embedding gradient] in
// kernels/cpu/embedding.cpp).

#include "ddp/nn/functional/embedding.h"

#include "ddp/autograd/node.h"
#include "ddp/tensor/ops.h"
#include "kernel_list.h"
#include "nn/functional/checks.h"

namespace ddp::nn::functional {

Tensor embedding(const Tensor& index, const Tensor& weight) {
  const char* op = "embedding";
  detail::check_defined(op, index, "index");
  detail::check_floating(op, weight, "weight");
  DDP_CHECK_T(DTypeError, index.dtype() == DType::i64 || index.dtype() == DType::i32,
              "{}: index must be an integer tensor (i64 or i32), got {}", op, index.describe());
  DDP_CHECK_T(DeviceError, index.device() == weight.device(),
              "{}: index {} and weight {} are on different devices", op, index.describe(),
              weight.describe());
  DDP_CHECK_T(ShapeError, weight.dim() == 2, "{}: weight must be [num_embeddings, dim], got {}", op,
              weight.describe());
  const int64_t n = index.numel(), dim = weight.size(1);
  const TensorOptions opts = TensorOptions(weight.dtype()).device(weight.device());
  Tensor flat = index.detach().contiguous().reshape({n});
  Tensor w = weight.detach().contiguous();
  Tensor rows = Tensor::empty({n, dim}, opts);
  if (n > 0 && dim > 0) kernels::call<kernels::embedding_forward>(w.device(), w, flat, rows);
  Shape out_shape = index.shape();
  out_shape.push_back(dim);
  Tensor out = rows.view(out_shape);
  if (autograd::needs_grad({weight})) {
    const Shape ws = weight.shape();
    autograd::record(op, {weight}, {out}, [flat, ws, opts, n, dim](const Tensors& g) -> Tensors {
      Tensor dy = g[0].to(opts.dtype_).contiguous().view({n, dim});
      Tensor dw = Tensor::empty(ws, opts);
      if (n > 0 && dim > 0)
        kernels::call<kernels::embedding_backward>(dw.device(), dy, flat, dw);
      else
        dw.zero_();
      return {dw};
    });
  }
  return out;
}

}  // namespace ddp::nn::functional
