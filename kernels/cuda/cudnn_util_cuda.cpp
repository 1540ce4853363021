// See kernels/cuda/cudnn_util.h.
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

#include <climits>
#include <utility>

#include "core/cuda_check.h"
#include "cuda/on_device.h"
#include "cuda/cudnn_dims.h"
#include "ddp/tensor/cuda.h"
#include "cuda/cudnn_util.h"

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

cudaStream_t current_stream() { return cuda_kernels::native(cuda::current_stream()); }

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

// Everything is checked before the descriptor exists: a constructor that
// throws runs no destructor, so a descriptor created first would leak.
TensorDesc::TensorDesc(const Tensor& t, const char* op) {
  const std::array<int, 8> d = checked_dims(t, op);
  const cudnnDataType_t type = data_type(t.dtype(), op);
  DDP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_));
  const cudnnStatus_t st =
      cudnnSetTensor4dDescriptorEx(desc_, type, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
  if (st != CUDNN_STATUS_SUCCESS) cudnnDestroyTensorDescriptor(std::exchange(desc_, nullptr));
  DDP_CUDNN_CHECK(st);
}

TensorDesc::TensorDesc(int64_t c, DType dtype, const char* op) {
  DDP_CHECK_T(ShapeError, c > 0 && c <= INT_MAX, "{}: {} channels are beyond cuDNN's int range",
              op, c);
  const cudnnDataType_t type = data_type(dtype, op);
  DDP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_));
  const cudnnStatus_t st =
      cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, type, 1, int(c), 1, 1);
  if (st != CUDNN_STATUS_SUCCESS) cudnnDestroyTensorDescriptor(std::exchange(desc_, nullptr));
  DDP_CUDNN_CHECK(st);
}

TensorDesc::~TensorDesc() {
  if (desc_) cudnnDestroyTensorDescriptor(desc_);  // destructors never throw (docs/design.md)
}

}  // namespace ddp::nn::cudnn_util

#endif  // DDP_HAVE_CUDNN
