// batch_norm on CUDA through cuDNN's legacy calls
// (cudnnBatchNormalizationForwardTraining / ForwardInference / Backward,
// CUDNN_BATCHNORM_SPATIAL): the path for the cases no graph-API engine
// takes (Note [cuDNN batch norm graphs] in batch_norm_cuda.cpp, which
// registers the kernels); see Note [BatchNorm backends] in
// include/ddp/nn/functional/batch_norm.h.
//
// Note [cuDNN batch norm dtypes]
// cuDNN wants the per-channel tensors (scale, bias, running and saved
// statistics) in f32 for f16/bf16/f32 data and in f64 for f64 data.
// Parameters of another dtype (a model converted with to(kFloat16)) are
// converted for the call, and converted running statistics are copied back
// afterwards. Scale and bias are required by cuDNN, so an affine-less call
// passes ones and zeros. Some cuDNN versions answer NOT_SUPPORTED for bf16
// data in these calls: the kernels then run the same call on an f32 copy of
// the data and round the results once (the statistics are f32 either way).
// Inputs of rank other than 4 are viewed as [N, C, S, 1].

#include "ddp/config.h"

#if DDP_HAVE_CUDNN

#include "ddp/core/error.h"
#include "ddp/tensor/memory_format.h"
#include "kernel_list.h"
#include "cuda/cudnn_policy.h"
#include "cuda/cudnn_util.h"
#include "cuda/batch_norm_cuda_detail.h"
#include "tensor/device_guard.h"

namespace ddp::nn::functional::batch_norm_cuda {

Tensor param(const Tensor& t, DType dt, int64_t c, double fill, Device device) {
  if (!t.defined()) return Tensor::full({c}, fill, TensorOptions(dt).device(device));
  return t.to(dt).contiguous();
}
DType param_dtype(DType data) { return data == DType::f64 ? DType::f64 : DType::f32; }

Tensor as_4d(const Tensor& t) {
  if (!t.defined() || t.dim() == 4) return t;
  const int64_t s = t.size(0) * t.size(1) == 0 ? 0 : t.numel() / (t.size(0) * t.size(1));
  return t.view({t.size(0), t.size(1), s, 1});
}

using namespace ::ddp::nn::cudnn_util;

namespace {

constexpr const char* kOp = "batch_norm (cuDNN)";

// Runs `call(x, outs...)` with the data tensors as they are; when cuDNN
// answers NOT_SUPPORTED for bf16, once more on f32 copies, whose results
// are then rounded into the caller's outputs. See Note [cuDNN batch norm dtypes].
template <class Call>
void with_supported_dtype(const Tensors& inputs, const Tensors& outputs, Call&& call) {
  const cudnnStatus_t st = call(inputs, outputs);
  if (st == CUDNN_STATUS_SUCCESS) return;
  if (st != CUDNN_STATUS_NOT_SUPPORTED || inputs[0].dtype() != DType::bf16) DDP_CUDNN_CHECK(st);
  auto f32 = [](const Tensor& t) {
    if (!t.defined()) return t;
    Tensor c = t.to(DType::f32);
    return is_channels_last(t) ? to_channels_last(c) : c.contiguous();
  };
  Tensors in32, out32;
  for (const Tensor& t : inputs) in32.push_back(f32(t));
  for (const Tensor& t : outputs)
    out32.push_back(t.defined() ? empty_nchw(t.shape(), DType::f32, t.device(), is_channels_last(t))
                                : t);
  DDP_CUDNN_CHECK(call(in32, out32));
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].defined()) Tensor(outputs[i]).copy_(out32[i]);
}

// The per-channel tensors of one call in cuDNN's dtype (Note [cuDNN batch
// norm dtypes]); running statistics stay undefined when not given.
struct PerChannel {
  int64_t c;
  DType pdt;
  Tensor scale, shift, rm, rv;
  PerChannel(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
             const Tensor& running_var)
      : c(x.size(1)), pdt(param_dtype(x.dtype())) {
    scale = param(weight, pdt, c, 1.0, x.device());
    shift = param(bias, pdt, c, 0.0, x.device());
    if (running_mean.defined()) rm = param(running_mean, pdt, c, 0.0, x.device());
    if (running_var.defined()) rv = param(running_var, pdt, c, 1.0, x.device());
  }
};

}  // namespace

void legacy_train_forward(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                   const Tensor& running_mean, const Tensor& running_var, double momentum,
                   double eps, const Tensor& y_in, const Tensor& save_mean,
                   const Tensor& save_invstd) {
  CudaDeviceGuard guard(x_in.device().index);
  const Tensor x = as_4d(x_in), y = as_4d(y_in);
  const PerChannel p(x, weight, bias, running_mean, running_var);
  const Tensor &scale = p.scale, &shift = p.shift, &rm = p.rm, &rv = p.rv;
  // save_mean and save_invstd are [C] in p.pdt already (the kernel contract).
  cudnnHandle_t h = handle();
  TensorDesc pd(p.c, p.pdt, kOp);
  Scale one(1.0), zero(0.0);
  with_supported_dtype({x}, {y}, [&](const Tensors& in, const Tensors& out) {
    TensorDesc xd(in[0], kOp), yd(out[0], kOp);
    const DType dt = in[0].dtype();
    return cudnnBatchNormalizationForwardTraining(
        h, CUDNN_BATCHNORM_SPATIAL, one.for_dtype(dt), zero.for_dtype(dt), xd.get(),
        in[0].data_ptr(), yd.get(), out[0].data_ptr(), pd.get(), scale.data_ptr(),
        shift.data_ptr(), momentum, rm.defined() ? rm.data_ptr() : nullptr,
        rv.defined() ? rv.data_ptr() : nullptr, eps, save_mean.data_ptr(), save_invstd.data_ptr());
  });
  // Converted running statistics go back into the caller's buffers.
  if (rm.defined() && !rm.is_same(running_mean)) Tensor(running_mean).copy_(rm);
  if (rv.defined() && !rv.is_same(running_var)) Tensor(running_var).copy_(rv);
}

void legacy_eval_forward(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, double eps,
                  const Tensor& y_in) {
  CudaDeviceGuard guard(x_in.device().index);
  const Tensor x = as_4d(x_in), y = as_4d(y_in);
  const PerChannel p(x, weight, bias, running_mean, running_var);  // both statistics defined
  const Tensor &scale = p.scale, &shift = p.shift, &rm = p.rm, &rv = p.rv;
  cudnnHandle_t h = handle();
  TensorDesc pd(p.c, p.pdt, kOp);
  Scale one(1.0), zero(0.0);
  with_supported_dtype({x}, {y}, [&](const Tensors& in, const Tensors& out) {
    TensorDesc xd(in[0], kOp), yd(out[0], kOp);
    const DType dt = in[0].dtype();
    return cudnnBatchNormalizationForwardInference(
        h, CUDNN_BATCHNORM_SPATIAL, one.for_dtype(dt), zero.for_dtype(dt), xd.get(),
        in[0].data_ptr(), yd.get(), out[0].data_ptr(), pd.get(), scale.data_ptr(),
        shift.data_ptr(), rm.data_ptr(), rv.data_ptr(), eps);
  });
}

// Evaluation mode: y = (x - mean)·invstd·w + b is affine in x, so
// dx = dy·invstd·w, dw = Σ dy·(x - mean)·invstd, db = Σ dy, in the
// statistics dtype (Note [cuDNN batch norm dtypes]). cuDNN has no call for
// it; the Tensor's in-place arithmetic and the channel sum compute it, in
// the order the composed ops of the CPU frontend would.
void eval_backward(const Tensor& x, const Tensor& dy, const Tensor& weight, const Tensor& mean,
                   const Tensor& invstd, const Tensor& dx, const Tensor& dweight,
                   const Tensor& dbias) {
  const int64_t rank = x.dim();
  Shape s(size_t(rank), 1);
  s[1] = x.size(1);
  const DType pdt = param_dtype(x.dtype());
  // A fresh copy of t in pdt, in t's layout, for in-place arithmetic.
  auto fresh = [pdt](const Tensor& t) {
    Tensor c = t.to(pdt);
    return c.is_same(t) ? t.clone() : c;
  };
  const Tensor dy32 = dy.to(pdt), m = mean.to(pdt).view(s), is = invstd.to(pdt).view(s);
  if (dx.defined()) {
    Tensor k = fresh(is);
    if (weight.defined()) k.mul_(weight.to(pdt).view(s));
    Tensor(dx).copy_(fresh(dy32).mul_(k));
  }
  if (dweight.defined()) {
    Tensor t = fresh(x);
    t.sub_(m).mul_(is).mul_(dy32);
    Tensor(dweight).copy_(cudnn_policy::channel_sum(t));
  }
  if (dbias.defined()) Tensor(dbias).copy_(cudnn_policy::channel_sum(dy32));
}

void legacy_backward(const Tensor& x_in, const Tensor& dy_in, const Tensor& weight,
              const Tensor& save_mean, const Tensor& save_invstd, bool batch_stats, double eps,
              const Tensor& dx_in, const Tensor& dweight, const Tensor& dbias) {
  CudaDeviceGuard guard(x_in.device().index);
  if (!batch_stats)
    return eval_backward(x_in, dy_in, weight, save_mean, save_invstd, dx_in, dweight, dbias);
  const Tensor x = as_4d(x_in), dy = as_4d(dy_in);
  const int64_t c = x.size(1);
  const DType pdt = param_dtype(x.dtype());
  Tensor scale = param(weight, pdt, c, 1.0, x.device());
  // cuDNN writes every output; unwanted ones go to scratch.
  Tensor dx = dx_in.defined() ? as_4d(dx_in)
                              : empty_nchw(x.shape(), x.dtype(), x.device(), is_channels_last(x));
  TensorOptions popts = TensorOptions(pdt).device(x.device());
  Tensor dw = Tensor::empty({c}, popts), db = Tensor::empty({c}, popts);
  cudnnHandle_t h = handle();
  TensorDesc pd(c, pdt, kOp);
  Scale one(1.0), zero(0.0);
  // The legacy call wants one descriptor for x, dy and dx: they share x's layout.
  with_supported_dtype({x, dy}, {dx}, [&](const Tensors& in, const Tensors& out) {
    TensorDesc xd(in[0], kOp);
    const DType dt = in[0].dtype();
    return cudnnBatchNormalizationBackward(
        h, CUDNN_BATCHNORM_SPATIAL, one.for_dtype(dt), zero.for_dtype(dt), one.for_dtype(pdt),
        zero.for_dtype(pdt), xd.get(), in[0].data_ptr(), xd.get(), in[1].data_ptr(), xd.get(),
        out[0].data_ptr(), pd.get(), scale.data_ptr(), dw.data_ptr(), db.data_ptr(),
        eps, save_mean.data_ptr(),
        save_invstd.data_ptr());
  });
  if (dweight.defined()) Tensor(dweight).copy_(dw);
  if (dbias.defined()) Tensor(dbias).copy_(db);
}

}  // namespace ddp::nn::functional::batch_norm_cuda

#endif  // DDP_HAVE_CUDNN
