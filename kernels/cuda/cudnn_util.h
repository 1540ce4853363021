#pragma once
// Internal helpers for the cuDNN-backed layers: per-thread handles bound to
// the current stream (every cuDNN call, graph API included: cudnn_graph.h),
// and the RAII descriptors and dtype mapping of the legacy calls. Only
// *_cuda.cpp files include this.
//
// The legacy batch-norm path (batch_norm_legacy_cuda.cpp) uses cuDNN's
// legacy (v7-style) API, which cuDNN 9 still ships but marks deprecated; the
// deprecation warnings are silenced here, once. Convolution uses the graph
// API only (its bias included: Note [cuDNN convolution]).

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

#include <cuda_runtime.h>
#include <cudnn.h>

#include "ddp/core/dtype.h"
#include "ddp/tensor/tensor.h"
#include "cuda/cudnn_check.h"

namespace ddp::nn::cudnn_util {

// The calling thread's cuDNN handle for the current device, set to that
// device's current ddp stream. See Note [cuDNN handles] in cudnn_util_cuda.cpp.
cudnnHandle_t handle();
// The current stream of the current device, as cudaStream_t.
cudaStream_t current_stream();

// CUDNN_DATA_FLOAT / DOUBLE / HALF / BFLOAT16; DTypeError otherwise.
cudnnDataType_t data_type(DType dtype, const char* op);
// The dtype scaling factors (alpha, beta) must have: double for f64, else float.
struct Scale {
  double d;
  float f;
  explicit Scale(double v) : d(v), f(float(v)) {}
  const void* for_dtype(DType t) const {
    return t == DType::f64 ? static_cast<const void*>(&d) : &f;
  }
};

// RAII cudnnTensorDescriptor_t for a 4-D tensor with its real strides (so
// NCHW and NHWC layouts both describe themselves), or for [1, C, 1, 1].
class TensorDesc {
 public:
  TensorDesc(const Tensor& t, const char* op);
  TensorDesc(int64_t c, DType dtype, const char* op);  // [1, C, 1, 1]
  ~TensorDesc();
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

}  // namespace ddp::nn::cudnn_util
