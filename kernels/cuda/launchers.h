#pragma once
// The CUDA kernel launchers behind CudaBackend (src/tensor/backend_cuda.cpp),
// one per kernel family; the kernels themselves are static in kernels/cuda/<family>.cu
// (bmm, a cuBLAS call, lives in src/tensor/matmul_cuda.cpp). Each launcher
// implements the Backend method of the same name under the guarantees stated
// in ddp/tensor/backend.h, queues its work on `stream` and checks the launch.
// The caller has made the tensors' device current.

#include <cuda_runtime.h>

#include <cstdint>

#include "ddp/tensor/backend.h"
#include "ddp/tensor/cuda.h"

namespace ddp::cuda_kernels {

// copy_fill.cu
void copy(const Tensor& src, const Tensor& dst, cuda::Stream stream);
void fill(const Tensor& out, double value, cuda::Stream stream);
void arange(const Tensor& out, double start, double step, cuda::Stream stream);

// unary.cu
void unary(UnaryOp op, const Tensor& in, const Tensor& out, cuda::Stream stream);
void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                    const Tensor& dx, cuda::Stream stream);

// binary.cu
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, cuda::Stream stream);
void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out,
             cuda::Stream stream);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out,
           cuda::Stream stream);

// reduce.cu
void reduce_rows(ReductionOp op, const Tensor& in, const Tensor& out, cuda::Stream stream);
void reduce_cols(ReductionOp op, const Tensor& in, const Tensor& out, cuda::Stream stream);

// src/tensor/matmul_cuda.cpp (cuBLAS)
void bmm(const Tensor& a, const Tensor& b, const Tensor& out, cuda::Stream stream);


// random.cu
void random(const Tensor& out, Backend::Distribution dist, double a, double b, uint64_t seed,
            uint64_t counter, cuda::Stream stream);

// index.cu
void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out,
            cuda::Stream stream);
void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src,
                 cuda::Stream stream);

}  // namespace ddp::cuda_kernels
