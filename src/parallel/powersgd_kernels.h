#pragma once
// The arithmetic of one PowerSGD step on one compressed n x m gradient M
// (private to powersgd.cpp). Each function has a direct loop for contiguous
// f32/f64 tensors on the CPU and falls back to tensor ops otherwise (f16,
// bf16, CUDA).
//
// Note [PowerSGD passes over memory]
// The factors are tiny (r columns); the cost of a step is the number of
// times the n x m gradients and their error memory stream through memory.
// General tensor ops made about a dozen such passes per step, and the
// matmul packed (copied) the gradient before each skinny product. The loops
// here make seven with error feedback (three without): read M and the error,
// write the error = M + error (input kept until the result is known) while
// P = input Q is summed on the row still in cache; read the input once more
// for Q = input^T P; and write M = P Q^T and error -= M in one last pass.
// The bucket buffer M itself is only written at the end.

#include "ddp/tensor/tensor.h"

namespace ddp::parallel::powersgd_detail {

// Gram-Schmidt on the columns of an n x r matrix, in place. With epsilon 0
// an all-zero column stays zero (its norm floors at the dtype's smallest
// normal number).
void orthogonalize(const Tensor& matrix, double epsilon);

// With error feedback (error defined, the shape of m): error += m, then
// p = error q; else p = m q. m: n x m, q: m x r, p: n x r.
void add_error_and_project(const Tensor& m, const Tensor& error, const Tensor& q, const Tensor& p);

// q = input^T p. input: n x m, p: n x r, q: m x r.
void project_back(const Tensor& input, const Tensor& p, const Tensor& q);

// m = p q^T, and error -= m when error is defined.
void reconstruct(const Tensor& m, const Tensor& error, const Tensor& p, const Tensor& q);

}  // namespace ddp::parallel::powersgd_detail
