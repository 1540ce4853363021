#pragma once
// Check macros for CUDA runtime, cuBLAS and cuDNN calls (internal: needs the
// CUDA headers). Each raises the matching ddp::Error subclass with the call,
// the library's error name and string, and file:line.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"

#define DDP_CUDA_CHECK(expr)                                                                   \
  do {                                                                                         \
    cudaError_t ddp_err_ = (expr);                                                             \
    if (ddp_err_ != cudaSuccess) {                                                             \
      (void)cudaGetLastError(); /* clear the sticky-free error state */                        \
      DDP_THROW(CudaError, "{} failed: {}: {}", #expr, cudaGetErrorName(ddp_err_),             \
                cudaGetErrorString(ddp_err_));                                                 \
    }                                                                                          \
  } while (0)

namespace ddp::detail {
// With DDP_CUDA_DEBUG_SYNC=1: whether to synchronise after each launch (read
// once). See Note [Kernel registry].
bool cuda_debug_sync();
}  // namespace ddp::detail

// After a kernel launch: catches bad launch configurations at once, and with
// DDP_CUDA_DEBUG_SYNC=1 also faults inside the kernel, naming it.
#define DDP_CUDA_CHECK_LAUNCH(kernel_name)                                                     \
  do {                                                                                         \
    DDP_CUDA_CHECK(cudaGetLastError());                                                        \
    if (::ddp::detail::cuda_debug_sync()) {                                                    \
      cudaError_t ddp_err_ = cudaDeviceSynchronize();                                          \
      if (ddp_err_ != cudaSuccess) {                                                           \
        (void)cudaGetLastError();                                                              \
        DDP_THROW(CudaError, "kernel {} failed (found by DDP_CUDA_DEBUG_SYNC=1): {}: {}",      \
                  kernel_name, cudaGetErrorName(ddp_err_), cudaGetErrorString(ddp_err_));      \
      }                                                                                        \
    }                                                                                          \
  } while (0)

#define DDP_CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                         \
    cublasStatus_t ddp_st_ = (expr);                                                           \
    if (ddp_st_ != CUBLAS_STATUS_SUCCESS)                                                      \
      DDP_THROW(CublasError, "{} failed: {}: {}", #expr, cublasGetStatusName(ddp_st_),         \
                cublasGetStatusString(ddp_st_));                                               \
  } while (0)

// Logs instead of throwing: for destructors, which never throw (docs/design.md).
#define DDP_CUDA_WARN(expr)                                                                    \
  do {                                                                                         \
    cudaError_t ddp_err_ = (expr);                                                             \
    if (ddp_err_ != cudaSuccess) {                                                             \
      (void)cudaGetLastError();                                                                \
      DDP_LOG_WARNING("{} failed: {}", #expr, cudaGetErrorString(ddp_err_));                   \
    }                                                                                          \
  } while (0)
