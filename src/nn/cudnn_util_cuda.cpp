// See src/nn/cudnn_util.h.
//
// Note [cuDNN handles]
// A cuDNN handle belongs to one device and must not be used by two threads
// at once, so each (thread, device) gets its own, created on first use and
// re-bound to the current ddp stream on every call (cudnnSetStream is
// cheap). When a thread exits its handles go to a per-device free list for
// the next thread, so short-lived threads do not leak handles; the list is
// leaked at exit on purpose, as the cuBLAS handles are (Note [cuBLAS
// handles]), because destroying handles after the CUDA runtime has shut down
// crashes.

#include "ddp/config.h"

#if DDP_HAVE_CUDNN

#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda_check.h"
#include "ddp/tensor/cuda.h"
#include "nn/cudnn_util.h"

namespace ddp::nn::cudnn_util {

namespace {

struct HandlePool {
  std::mutex mu;
  std::unordered_map<int, std::vector<cudnnHandle_t>> free;  // by device
};
HandlePool& pool() {
  static auto* p = new HandlePool;  // leaked: see Note [cuDNN handles]
  return *p;
}

struct ThreadHandles {
  std::unordered_map<int, cudnnHandle_t> by_device;
  ~ThreadHandles() {
    HandlePool& p = pool();
    std::lock_guard<std::mutex> g(p.mu);
    for (auto& [device, h] : by_device) p.free[device].push_back(h);
  }
};

}  // namespace

cudaStream_t current_stream() { return static_cast<cudaStream_t>(cuda::current_stream().handle()); }

cudnnHandle_t handle() {
  int device = 0;
  DDP_CUDA_CHECK(cudaGetDevice(&device));
  thread_local ThreadHandles mine;
  cudnnHandle_t& h = mine.by_device[device];
  if (!h) {
    HandlePool& p = pool();
    {
      std::lock_guard<std::mutex> g(p.mu);
      auto& list = p.free[device];
      if (!list.empty()) {
        h = list.back();
        list.pop_back();
      }
    }
    if (!h) DDP_CUDNN_CHECK(cudnnCreate(&h));
  }
  DDP_CUDNN_CHECK(cudnnSetStream(h, current_stream()));
  return h;
}

cudnnDataType_t data_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f64:
      return CUDNN_DATA_DOUBLE;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      break;
  }
  DDP_THROW(DTypeError, "{}: cuDNN takes f32, f64, f16 or bf16, got {}", op, dtype_name(dtype));
}

TensorDesc::TensorDesc(const Tensor& t, const char* op) {
  DDP_CHECK_T(ShapeError, t.dim() == 4, "{}: cuDNN tensor descriptors here are 4-D, got {}", op,
              t.describe());
  DDP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_));
  DDP_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(
      desc_, data_type(t.dtype(), op), int(t.size(0)), int(t.size(1)), int(t.size(2)),
      int(t.size(3)), int(t.stride(0)), int(t.stride(1)), int(t.stride(2)), int(t.stride(3))));
}

TensorDesc::TensorDesc(int64_t c, DType dtype, const char* op) {
  DDP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_));
  DDP_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, data_type(dtype, op), 1, int(c), 1, 1));
}

TensorDesc::~TensorDesc() {
  if (desc_) cudnnDestroyTensorDescriptor(desc_);  // never throws: see ARCHITECTURE.md
}

}  // namespace ddp::nn::cudnn_util

#endif  // DDP_HAVE_CUDNN
