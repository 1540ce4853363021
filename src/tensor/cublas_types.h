#pragma once
// How a tensor dtype is described to cuBLAS and cuBLASLt: the data type, the
// compute type and the type of alpha/beta. Floating dtypes only; everything
// accumulates in f32 (Note [Compute type]) except f64, which stays f64.
// Internal, for *_cuda.cpp files.

#include <cublas_api.h>
#include <library_types.h>

#include <optional>

#include "ddp/core/dtype.h"

namespace ddp {

struct CublasTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;  // alpha and beta
};

inline std::optional<CublasTypes> cublas_types(DType d) {
  switch (d) {
    case DType::f32: return CublasTypes{CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::f16: return CublasTypes{CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::bf16: return CublasTypes{CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::f64: return CublasTypes{CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    default: return std::nullopt;
  }
}

}  // namespace ddp
