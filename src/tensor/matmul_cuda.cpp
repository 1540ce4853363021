// Batched matmul on CUDA through cuBLAS (cublasGemmStridedBatchedEx).
//
// Note [cuBLAS bmm layouts]
// cuBLAS is column-major, and a row-major [R, C] matrix read column-major is
// its transpose. So out = a @ b (row-major, [M, N]) is computed as
// out^T = b^T a^T: cuBLAS's first operand is b, its second a, and it writes
// an [N, M] column-major result, which is out row-major with ldc = N. An
// operand with column stride 1 is handed over as OP_N with ld = its row
// stride (cuBLAS reads it as the transpose we want); one with row stride 1 as
// OP_T with ld = its column stride. A dim of size 1 makes its stride
// irrelevant, and cuBLAS still wants ld >= the other extent, so such ld are
// replaced by a legal value. Anything else (a stride 0 inside a matrix, ...)
// is first copied into a contiguous buffer. f16/bf16 multiply with f32
// accumulation (CUBLAS_COMPUTE_32F) and reduced-precision reductions
// disallowed; f32 uses CUBLAS_COMPUTE_32F too (no TF32), f64 CUBLAS_COMPUTE_64F.
//
// Note [cuBLAS handles]
// cuBLAS handles are not thread-safe and belong to one device, so each
// (thread, device) gets its own, created on first use. When a thread exits its
// handles go back to a per-device pool for the next thread, so short-lived
// threads do not leak handles; the pool is leaked at exit on purpose (Note
// [Leaked singletons] in caching_allocator_cuda.cpp). A handle keeps one
// workspace per stream, from the caching allocator, so work queued on two
// streams never shares scratch memory.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda_check.h"
#include "cuda/on_device.h"
#include "cuda/launchers.h"
#include "tensor/caching_allocator.h"
#include "tensor/cublas_types.h"

namespace ddp::cuda_kernels {

namespace {

struct CublasHandle {
  cublasHandle_t handle = nullptr;
  int device = 0;
  std::unordered_map<cudaStream_t, Storage> workspaces;  // See Note [cuBLAS handles]
};

struct HandlePool {
  std::mutex mu;
  std::unordered_map<int, std::vector<CublasHandle*>> free;  // by device
};
HandlePool& handle_pool() {
  static auto* pool = new HandlePool;  // leaked on purpose: see Note [cuBLAS handles]
  return *pool;
}

// The calling thread's handles; returns them to the pool at thread exit.
struct ThreadHandles {
  std::unordered_map<int, CublasHandle*> by_device;
  ~ThreadHandles() {
    HandlePool& pool = handle_pool();
    std::lock_guard<std::mutex> g(pool.mu);
    for (auto& [device, h] : by_device) pool.free[device].push_back(h);
  }
};

// The current device's handle for this thread, bound to `stream` with its workspace.
cublasHandle_t cublas_handle(cudaStream_t stream) {
  int device = 0;
  DDP_CUDA_CHECK(cudaGetDevice(&device));
  thread_local ThreadHandles mine;
  CublasHandle*& h = mine.by_device[device];
  if (!h) {
    HandlePool& pool = handle_pool();
    {
      std::lock_guard<std::mutex> g(pool.mu);
      auto& list = pool.free[device];
      if (!list.empty()) {
        h = list.back();
        list.pop_back();
      }
    }
    if (!h) {
      auto fresh = std::make_unique<CublasHandle>();
      fresh->device = device;
      DDP_CUBLAS_CHECK(cublasCreate(&fresh->handle));
      DDP_CUBLAS_CHECK(cublasSetMathMode(
          fresh->handle,
          cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
      h = fresh.release();
    }
  }
  // cublasSetStream resets the workspace, so set the workspace after it.
  DDP_CUBLAS_CHECK(cublasSetStream(h->handle, stream));
  Storage& ws = h->workspaces[stream];
  if (!ws.defined()) {
    int major = 0;
    DDP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    // NVIDIA's guidance: 32 MiB on Hopper and newer, 4 MiB before.
    const size_t bytes = size_t(major >= 9 ? 32 : 4) << 20;
    ws = cuda_allocate(bytes, device);
  }
  DDP_CUBLAS_CHECK(cublasSetWorkspace(h->handle, ws.data(), ws.nbytes()));
  return h->handle;
}

// One bmm operand as cuBLAS reads it. See Note [cuBLAS bmm layouts].
struct Operand {
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 1;
  const void* data = nullptr;
  int64_t batch_stride = 0;
  Tensor packed;  // keeps a contiguous copy alive when one was needed
};

// How cuBLAS reads the transpose of a row-major R x C matrix with strides
// rs, cs; false when it cannot without a copy.
bool cublas_layout(int64_t R, int64_t C, int64_t rs, int64_t cs, cublasOperation_t& op,
                   int64_t& ld) {
  if ((cs == 1 || C == 1) && (R == 1 || rs >= std::max<int64_t>(1, C))) {
    op = CUBLAS_OP_N;
    ld = R == 1 ? std::max<int64_t>(1, C) : rs;
    return true;
  }
  if ((rs == 1 || R == 1) && (C == 1 || cs >= std::max<int64_t>(1, R))) {
    op = CUBLAS_OP_T;
    ld = C == 1 ? std::max<int64_t>(1, R) : cs;
    return true;
  }
  return false;
}

Operand make_operand(const Tensor& t, cuda::Stream stream) {
  Operand o;
  const int64_t R = t.size(-2), C = t.size(-1);
  if (cublas_layout(R, C, t.stride(-2), t.stride(-1), o.op, o.ld)) {
    o.data = t.data_ptr();
    o.batch_stride = t.stride(0);
    return o;
  }
  const Shape& shape = t.shape();
  Storage s = cuda_allocate(t.nbytes(), t.device().index);
  o.packed = Tensor::from_storage(std::move(s), shape, contiguous_strides(shape), 0, t.dtype());
  copy(t, o.packed, stream);
  cublas_layout(R, C, C, 1, o.op, o.ld);
  o.data = o.packed.data_ptr();
  o.batch_stride = R * C;
  return o;
}

int to_int(int64_t v, const char* what) {
  DDP_CHECK(v >= 0 && v <= INT_MAX, "bmm on CUDA: {} = {} exceeds the cuBLAS int range", what, v);
  return int(v);
}

}  // namespace

void bmm(const Tensor& a, const Tensor& b, const Tensor& out, cuda::Stream stream_arg) {
  const cudaStream_t stream = native(stream_arg);
  const int64_t batch = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  if (batch == 0 || M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: zeros
    DDP_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream));
    return;
  }
  const std::optional<CublasTypes> types = cublas_types(a.dtype());
  if (!types)
    DDP_THROW(DTypeError, "bmm on CUDA: expected a floating dtype, got {}",
              dtype_name(a.dtype()));
  const cudaDataType_t type = types->data;
  const cublasComputeType_t compute = types->compute;
  const Operand ob = make_operand(b, stream_arg);  // cuBLAS's first operand: b^T, [N, K]
  const Operand oa = make_operand(a, stream_arg);  // its second: a^T, [K, M]
  cublasHandle_t h = cublas_handle(stream);
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const bool f64 = a.dtype() == DType::f64;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  DDP_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h, ob.op, oa.op, to_int(N, "N"), to_int(M, "M"), to_int(K, "K"), alpha, ob.data, type,
      to_int(ob.ld, "ld(b)"), ob.batch_stride, oa.data, type, to_int(oa.ld, "ld(a)"),
      oa.batch_stride, beta, out.data_ptr(), type, to_int(N, "N"), M * N, to_int(batch, "batch"),
      compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace ddp::cuda_kernels
