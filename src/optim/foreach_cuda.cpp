// See src/optim/foreach.h: the CUDA side of the multi-tensor ops, on the
// tensors' device and its current stream.

#include "cuda/foreach.h"
#include "ddp/tensor/cuda.h"
#include "optim/foreach.h"
#include "tensor/cuda_allocator.h"

namespace ddp::optim::multi_tensor::cuda_impl {

namespace {

// The device of `t` made current for a call, and its current stream.
struct OnDevice {
  CudaDeviceGuard guard;
  cudaStream_t stream;
  explicit OnDevice(const Tensor& t)
      : guard(t.device().index),
        stream(static_cast<cudaStream_t>(cuda::current_stream(t.device().index).handle())) {}
};

}  // namespace

void sgd_step(const Tensors& params, const Tensors& grads, const Tensors& bufs,
              const std::vector<uint8_t>& fresh, const kernels::SgdScalars& s) {
  if (params.empty()) return;
  OnDevice on(params[0]);
  cuda_kernels::foreach_sgd(params, grads, bufs, fresh, s, on.stream);
}

void adamw_step(const Tensors& params, const Tensors& grads, const Tensors& exp_avgs,
                const Tensors& exp_avg_sqs, const Tensors& max_exp_avg_sqs,
                const std::vector<kernels::AdamWTensorScalars>& per_tensor,
                const kernels::AdamWScalars& s) {
  if (params.empty()) return;
  OnDevice on(params[0]);
  cuda_kernels::foreach_adamw(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, per_tensor, s,
                              on.stream);
}

double pow_sum(const Tensors& xs, double p) {
  if (xs.empty()) return 0.0;
  OnDevice on(xs[0]);
  Tensor out = Tensor::empty({}, TensorOptions(DType::f64).device(xs[0].device()));
  cuda_kernels::foreach_norm(xs, p, out, on.stream);
  return out.item<double>();
}

bool mul_(const Tensors& xs, double factor, bool check_finite) {
  if (xs.empty()) return false;
  OnDevice on(xs[0]);
  Tensor found;
  if (check_finite) found = Tensor::zeros({}, TensorOptions(DType::f32).device(xs[0].device()));
  cuda_kernels::foreach_mul_(xs, factor, found, on.stream);
  return check_finite && found.item<float>() != 0.0f;
}

}  // namespace ddp::optim::multi_tensor::cuda_impl
