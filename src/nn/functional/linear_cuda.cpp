// The CUDA forward of linear: one cuBLASLt matmul with the bias epilogue.
//
// Note [cuBLASLt linear]
// y [rows, out] = x [rows, in] · wᵀ + b, all row-major and contiguous. cuBLASLt
// is column-major, where a row-major [R, C] matrix reads as its transpose
// [C, R]. So the call computes yᵀ (out × rows, ld = out) = op_T(w) · x with
// A = w stored as (in × out, ld = in), transposed, and B = x stored as
// (in × rows, ld = in). The bias epilogue adds a vector of D's row count
// (out) to every column, i.e. b to every row of y, in the same kernel.
// f16/bf16 multiply with f32 accumulation and scale, f32 in plain f32 (no
// TF32, as the bmm op: Note [cuBLAS bmm layouts]), f64 in f64.
// Pointer alignments are passed to the heuristic, so views with an offset
// get an algorithm that can read them; when the heuristic offers none, or the
// chosen one reports NOT_SUPPORTED, linear_forward returns false and the
// caller takes the composed matmul + add path.
// The backward (in linear.cpp) uses the matmul op (cuBLAS) for dX and dW and
// a row sum for db.
//
// One cuBLASLt handle per device serves every thread: the stream and the
// workspace are arguments of each call, so the handle holds no per-call
// state. The handles are leaked at exit on purpose (Note [Leaked singletons]
// in caching_allocator_cuda.cpp). The workspace comes from the caching
// allocator on the current stream, so it may be released right after the
// call is queued.

#include <cublasLt.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "core/cuda_check.h"
#include "ddp/tensor/cuda.h"
#include "cuda/on_device.h"
#include "kernel_list.h"
#include "tensor/caching_allocator.h"
#include "tensor/device_guard.h"
#include "tensor/cublas_types.h"

namespace ddp::nn::functional {

namespace {

cublasLtHandle_t lt_handle(int device) {
  static std::mutex mu;
  static auto* handles = new std::unordered_map<int, cublasLtHandle_t>;  // leaked: see Note
  std::lock_guard<std::mutex> g(mu);
  cublasLtHandle_t& h = (*handles)[device];
  if (!h) DDP_CUBLAS_CHECK(cublasLtCreate(&h));
  return h;
}

// RAII owners of the cuBLASLt descriptors; a destructor ignores the status (it never throws).
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() {
    if (d) cublasLtMatmulDescDestroy(d);
  }
};
struct MatrixLayout {
  cublasLtMatrixLayout_t l = nullptr;
  ~MatrixLayout() {
    if (l) cublasLtMatrixLayoutDestroy(l);
  }
};
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() {
    if (p) cublasLtMatmulPreferenceDestroy(p);
  }
};

// The largest power of two, up to 256, that divides the address.
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

template <class V>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  DDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}
template <class V>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const V& v) {
  DDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)));
}

}  // namespace

static bool cublaslt_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  if (rows == 0 || out == 0) return true;  // nothing to write
  if (in == 0) return false;               // y = b: the composed path fills it

  const std::optional<CublasTypes> types = cublas_types(x.dtype());
  if (!types) return false;
  const cudaDataType_t type = types->data;
  const cublasComputeType_t compute = types->compute;
  const cudaDataType_t scale_type = types->scale;

  const int device = x.device().index;
  CudaDeviceGuard guard(device);
  cudaStream_t stream = cuda_kernels::native(cuda::current_stream(device));
  cublasLtHandle_t h = lt_handle(device);

  MatmulDesc desc;
  DDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, compute, scale_type));
  set_desc(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, cublasOperation_t(CUBLAS_OP_T));
  set_desc(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, cublasOperation_t(CUBLAS_OP_N));
  if (bias.defined()) {
    set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, cublasLtEpilogue_t(CUBLASLT_EPILOGUE_BIAS));
    set_desc(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.data_ptr());
    set_desc(desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, type);
  }
  // See Note [cuBLASLt linear] for the layouts.
  MatrixLayout a, b, c;
  DDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a.l, type, uint64_t(in), uint64_t(out), in));
  DDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b.l, type, uint64_t(in), uint64_t(rows), in));
  DDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.l, type, uint64_t(out), uint64_t(rows), out));

  int major = 0;
  DDP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  // NVIDIA's guidance, as for cuBLAS: 32 MiB on Hopper and newer, 4 MiB before.
  const uint64_t ws_bytes = uint64_t(major >= 9 ? 32 : 4) << 20;
  Preference pref;
  DDP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
  set_pref(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws_bytes);
  set_pref(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(w.data_ptr()));
  set_pref(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(x.data_ptr()));
  set_pref(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(y.data_ptr()));
  set_pref(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(y.data_ptr()));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(h, desc.d, a.l, b.l, c.l, c.l, pref.p, 1, &result, &found);
  if (hs == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) return false;
  DDP_CUBLAS_CHECK(hs);

  Storage workspace = cuda_allocate(size_t(result.workspaceSize), device);
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const bool f64 = scale_type == CUDA_R_64F;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  const cublasStatus_t st = cublasLtMatmul(h, desc.d, alpha, w.data_ptr(), a.l, x.data_ptr(), b.l,
                                           beta, y.data_ptr(), c.l, y.data_ptr(), c.l, &result.algo,
                                           workspace.data(), size_t(result.workspaceSize), stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  DDP_CUBLAS_CHECK(st);
  return true;
}

DDP_REGISTER_KERNEL(linear_forward, CUDA, cublaslt_linear)

}  // namespace ddp::nn::functional
