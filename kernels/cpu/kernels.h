#pragma once
// The CPU kernels behind CpuBackend (src/tensor/backend_cpu.cpp), one family
// per file in kernels/cpu/. Each function implements the Backend method of
// the same name and relies on the guarantees stated in ddp/tensor/backend.h.

#include <cstdint>

#include "ddp/tensor/backend.h"

namespace ddp::cpu_kernels {

// copy_fill.cpp
void copy(const Tensor& src, const Tensor& dst);
void fill(const Tensor& out, double value);
void arange(const Tensor& out, double start, double step);

// elementwise.cpp
void unary(UnaryOp op, const Tensor& in, const Tensor& out);
void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                    const Tensor& dx);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);

// reduce.cpp
void reduce_rows(ReductionOp op, const Tensor& in, const Tensor& out);

// matmul.cpp
void bmm(const Tensor& a, const Tensor& b, const Tensor& out);

// random.cpp
void random(const Tensor& out, Backend::Distribution dist, double a, double b, uint64_t seed,
            uint64_t counter);

// index.cpp
void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out);
void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace ddp::cpu_kernels
