// batch_norm in training mode on CUDA through cuDNN
// (cudnnBatchNormalizationForwardTraining / Backward, CUDNN_BATCHNORM_SPATIAL);
// see Note [BatchNorm backends] in include/ddp/nn/functional/batch_norm.h.
//
// cuDNN wants the per-channel tensors (scale, bias, running and saved
// statistics) in f32 for f16/bf16/f32 data and in f64 for f64 data
// (cudnnDeriveBNTensorDescriptor says which). Parameters of another dtype
// (a model converted with to(kFloat16)) are converted for the call, and
// converted running statistics are copied back afterwards. Scale and bias
// are required by cuDNN, so an affine-less call passes ones and zeros.

#include "ddp/config.h"
#include "nn/functional/batch_norm_backend.h"

#if DDP_HAVE_CUDNN

#include "ddp/autograd/node.h"
#include "ddp/core/error.h"
#include "ddp/nn/functional/conv.h"
#include "nn/cudnn_util.h"
#include "tensor/cuda_allocator.h"

namespace ddp::nn::functional::batch_norm_detail {

namespace {

using namespace ::ddp::nn::cudnn_util;
constexpr const char* kOp = "batch_norm (cuDNN)";

// t in dtype dt, contiguous; or `fill` of shape [c] when t is undefined.
Tensor param(const Tensor& t, DType dt, int64_t c, double fill, Device device) {
  if (!t.defined()) return Tensor::full({c}, fill, TensorOptions(dt).device(device));
  return t.detach().to(dt).contiguous();
}

}  // namespace

bool have_cudnn() { return true; }

Tensor batch_norm_train_cudnn(const Tensor& x_in, const Tensor& running_mean,
                              const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                              double momentum, double eps) {
  CudaDeviceGuard guard(x_in.device().index);
  const int64_t c = x_in.size(1);
  const DType dt = x_in.dtype();
  const DType pdt = dt == DType::f64 ? DType::f64 : DType::f32;  // cuDNN's parameter dtype
  const bool channels_last = is_channels_last(x_in);
  Tensor x = channels_last ? x_in.detach() : x_in.detach().contiguous();
  Tensor y = empty_nchw(x.shape(), dt, x.device(), channels_last);
  Tensor scale = param(weight, pdt, c, 1.0, x.device());
  Tensor shift = param(bias, pdt, c, 0.0, x.device());
  Tensor rm = running_mean.defined() ? param(running_mean, pdt, c, 0.0, x.device()) : Tensor();
  Tensor rv = running_var.defined() ? param(running_var, pdt, c, 1.0, x.device()) : Tensor();
  TensorOptions popts = TensorOptions(pdt).device(x.device());
  Tensor save_mean = Tensor::empty({c}, popts), save_invstd = Tensor::empty({c}, popts);

  cudnnHandle_t h = handle();
  TensorDesc xd(x, kOp), yd(y, kOp), pd(c, pdt, kOp);
  Scale one(1.0), zero(0.0);
  DDP_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      h, CUDNN_BATCHNORM_SPATIAL, one.for_dtype(dt), zero.for_dtype(dt), xd.get(), x.data_ptr(),
      yd.get(), y.data_ptr(), pd.get(), scale.data_ptr(), shift.data_ptr(), momentum,
      rm.defined() ? rm.data_ptr() : nullptr, rv.defined() ? rv.data_ptr() : nullptr, eps,
      save_mean.data_ptr(), save_invstd.data_ptr()));
  // Converted running statistics go back into the caller's buffers.
  if (rm.defined() && !rm.is_same(running_mean)) Tensor(running_mean).copy_(rm);
  if (rv.defined() && !rv.is_same(running_var)) Tensor(running_var).copy_(rv);

  if (autograd::needs_grad({x_in, weight, bias})) {
    const bool need_w = autograd::needs_grad({weight}), need_b = autograd::needs_grad({bias});
    const DType wdt = weight.defined() ? weight.dtype() : pdt;
    const DType bdt = bias.defined() ? bias.dtype() : pdt;
    autograd::record(
        "batch_norm", {x_in, weight, bias}, {y},
        [x, scale, save_mean, save_invstd, eps, channels_last, need_w, need_b, wdt,
         bdt](const Tensors& g) -> Tensors {
          CudaDeviceGuard guard(x.device().index);
          Tensor dy = g[0].detach();
          dy = channels_last ? to_channels_last(dy) : dy.contiguous();
          const DType dt = x.dtype(), pdt = scale.dtype();
          Tensor dx = empty_nchw(x.shape(), dt, x.device(), channels_last);
          TensorOptions popts = TensorOptions(pdt).device(x.device());
          Tensor dw = Tensor::empty({x.size(1)}, popts), db = Tensor::empty({x.size(1)}, popts);
          cudnnHandle_t h = handle();
          // "same desc for x, dx, dy": all three share x's layout here.
          TensorDesc xd(x, kOp), pd(x.size(1), pdt, kOp);
          Scale one(1.0), zero(0.0);
          DDP_CUDNN_CHECK(cudnnBatchNormalizationBackward(
              h, CUDNN_BATCHNORM_SPATIAL, one.for_dtype(dt), zero.for_dtype(dt), one.for_dtype(pdt),
              zero.for_dtype(pdt), xd.get(), x.data_ptr(), xd.get(), dy.data_ptr(), xd.get(),
              dx.data_ptr(), pd.get(), scale.data_ptr(), dw.data_ptr(), db.data_ptr(), eps,
              save_mean.data_ptr(), save_invstd.data_ptr()));
          return {dx, need_w ? dw.to(wdt) : Tensor(), need_b ? db.to(bdt) : Tensor()};
        });
  }
  return y;
}

}  // namespace ddp::nn::functional::batch_norm_detail

#else  // CUDA without cuDNN: batch_norm composes tensor ops instead.

#include "ddp/core/error.h"

namespace ddp::nn::functional::batch_norm_detail {
bool have_cudnn() { return false; }
Tensor batch_norm_train_cudnn(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, double, double) {
  DDP_THROW(NotImplementedError, "batch_norm: this libddp was built without cuDNN");
}
}  // namespace ddp::nn::functional::batch_norm_detail

#endif
