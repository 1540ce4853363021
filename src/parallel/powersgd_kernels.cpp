// Direct loops for one PowerSGD step; see Note [PowerSGD passes over memory]
// in powersgd_kernels.h.

#include "parallel/powersgd_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ddp/tensor/ops.h"

namespace ddp::parallel::powersgd_detail {
namespace {

// The smallest positive normal number of the dtype: the floor of a column
// norm, so that an all-zero column divides to zero rather than NaN.
double tiny_norm(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return 6.103515625e-05;
    case DType::f64:
      return std::numeric_limits<double>::min();
    default:
      return double(std::numeric_limits<float>::min());  // f32, bf16
  }
}

bool direct(const Tensor& t) {
  return !t.defined() || (t.device().is_cpu() && t.is_contiguous() &&
                          (t.dtype() == DType::f32 || t.dtype() == DType::f64));
}

// Eight independent partial sums, so the compiler can keep them in one
// vector register (a single running sum would serialise on the adds).
template <class T>
T dot(const T* a, const T* b, int64_t len) {
  T acc[8] = {};
  int64_t j = 0;
  for (; j + 8 <= len; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[j + l] * b[j + l];
  T s = 0;
  for (int l = 0; l < 8; ++l) s += acc[l];
  for (; j < len; ++j) s += a[j] * b[j];
  return s;
}

// The r x m transpose of an m x r factor: the loops below walk a row of M
// against one contiguous column of the factor at a time.
template <class T>
std::vector<T> transposed(const Tensor& factor) {
  const int64_t m = factor.size(0), r = factor.size(1);
  const T* f = factor.data<T>();
  std::vector<T> t(size_t(m * r));
  for (int64_t j = 0; j < m; ++j)
    for (int64_t k = 0; k < r; ++k) t[size_t(k * m + j)] = f[j * r + k];
  return t;
}

template <class T>
void orthogonalize_direct(const Tensor& matrix, double epsilon) {
  const int64_t n = matrix.size(0), r = matrix.size(1);
  const double floor = tiny_norm(matrix.dtype());
  T* a = matrix.data<T>();
  for (int64_t i = 0; i < r; ++i) {
    double s = 0;
    for (int64_t row = 0; row < n; ++row) s += double(a[row * r + i]) * double(a[row * r + i]);
    const T norm = T(std::max(std::sqrt(s) + epsilon, floor));
    for (int64_t row = 0; row < n; ++row) a[row * r + i] /= norm;
    for (int64_t c = i + 1; c < r; ++c) {
      double d = 0;
      for (int64_t row = 0; row < n; ++row) d += double(a[row * r + i]) * double(a[row * r + c]);
      const T dt = T(d);
      for (int64_t row = 0; row < n; ++row) a[row * r + c] -= dt * a[row * r + i];
    }
  }
}

template <class T>
void add_error_and_project_direct(const Tensor& m, const Tensor& error, const Tensor& q,
                                  const Tensor& p) {
  const int64_t n = m.size(0), cols = m.size(1), r = q.size(1);
  const std::vector<T> qt = transposed<T>(q);
  const T* mp = m.data<T>();
  T* ep = error.defined() ? error.data<T>() : nullptr;
  T* pp = p.data<T>();
  for (int64_t i = 0; i < n; ++i) {
    const T* row = mp + i * cols;
    if (ep) {
      T* e = ep + i * cols;
      for (int64_t j = 0; j < cols; ++j) e[j] += row[j];
      row = e;
    }
    for (int64_t k = 0; k < r; ++k) pp[i * r + k] = dot(row, qt.data() + k * cols, cols);
  }
}

template <class T>
void project_back_direct(const Tensor& input, const Tensor& p, const Tensor& q) {
  const int64_t n = input.size(0), cols = input.size(1), r = p.size(1);
  std::vector<T> qt(size_t(r * cols), T(0));
  const T* in = input.data<T>();
  const T* pp = p.data<T>();
  // Four rows per sweep of Q^T: a quarter of the loads and stores of Q^T
  // (which, r rows of m, need not fit in L1), the same order of additions.
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const T* __restrict r0 = in + i * cols;
    const T* __restrict r1 = r0 + cols;
    const T* __restrict r2 = r1 + cols;
    const T* __restrict r3 = r2 + cols;
    for (int64_t k = 0; k < r; ++k) {
      const T s0 = pp[i * r + k], s1 = pp[(i + 1) * r + k], s2 = pp[(i + 2) * r + k],
              s3 = pp[(i + 3) * r + k];
      T* __restrict dst = qt.data() + k * cols;
      for (int64_t j = 0; j < cols; ++j) {
        T d = dst[j];
        d += s0 * r0[j];
        d += s1 * r1[j];
        d += s2 * r2[j];
        d += s3 * r3[j];
        dst[j] = d;
      }
    }
  }
  for (; i < n; ++i) {
    const T* row = in + i * cols;
    for (int64_t k = 0; k < r; ++k) {
      const T s = pp[i * r + k];
      T* dst = qt.data() + k * cols;
      for (int64_t j = 0; j < cols; ++j) dst[j] += s * row[j];
    }
  }
  T* qp = q.data<T>();
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t k = 0; k < r; ++k) qp[j * r + k] = qt[size_t(k * cols + j)];
}

template <class T>
void reconstruct_direct(const Tensor& m, const Tensor& error, const Tensor& p, const Tensor& q) {
  const int64_t n = m.size(0), cols = m.size(1), r = p.size(1);
  const std::vector<T> qt = transposed<T>(q);
  T* mp = m.data<T>();
  T* ep = error.defined() ? error.data<T>() : nullptr;
  const T* pp = p.data<T>();
  for (int64_t i = 0; i < n; ++i) {
    T* __restrict row = mp + i * cols;
    const T* s = pp + i * r;
    int64_t k = 0;
    // Four columns of Q per sweep of the row (fewer loads and stores of
    // the row), adding in the same order as one at a time.
    for (; k + 4 <= r; k += 4) {
      const T* __restrict q0 = qt.data() + k * cols;
      const T* __restrict q1 = q0 + cols;
      const T* __restrict q2 = q1 + cols;
      const T* __restrict q3 = q2 + cols;
      const T s0 = s[k], s1 = s[k + 1], s2 = s[k + 2], s3 = s[k + 3];
      if (k == 0) {
        for (int64_t j = 0; j < cols; ++j) {
          T v = s0 * q0[j];
          v += s1 * q1[j];
          v += s2 * q2[j];
          v += s3 * q3[j];
          row[j] = v;
        }
      } else {
        for (int64_t j = 0; j < cols; ++j) {
          T v = row[j] + s0 * q0[j];
          v += s1 * q1[j];
          v += s2 * q2[j];
          v += s3 * q3[j];
          row[j] = v;
        }
      }
    }
    if (k == 0) {
      for (int64_t j = 0; j < cols; ++j) row[j] = s[0] * qt[size_t(j)];
      k = 1;
    }
    for (; k < r; ++k) {
      const T sk = s[k];
      const T* src = qt.data() + k * cols;
      for (int64_t j = 0; j < cols; ++j) row[j] += sk * src[j];
    }
    if (ep) {
      T* e = ep + i * cols;
      for (int64_t j = 0; j < cols; ++j) e[j] -= row[j];
    }
  }
}

}  // namespace

void orthogonalize(const Tensor& matrix, double epsilon) {
  if (direct(matrix)) {
    if (matrix.dtype() == DType::f64) return orthogonalize_direct<double>(matrix, epsilon);
    return orthogonalize_direct<float>(matrix, epsilon);
  }
  const int64_t r = matrix.size(1);
  const double floor = tiny_norm(matrix.dtype());
  for (int64_t i = 0; i < r; ++i) {
    Tensor col = matrix.narrow(1, i, 1);  // views: writing them writes matrix
    Tensor norm = maximum(sqrt(sum(col * col)) + epsilon, floor);
    col.copy_(col / norm);
    if (i + 1 < r) {
      Tensor rest = matrix.narrow(1, i + 1, r - i - 1);
      rest.copy_(rest - sum(col * rest, {0}, true) * col);
    }
  }
}

void add_error_and_project(const Tensor& m, const Tensor& error, const Tensor& q, const Tensor& p) {
  if (direct(m) && direct(error) && direct(q) && direct(p)) {
    if (m.dtype() == DType::f64) return add_error_and_project_direct<double>(m, error, q, p);
    return add_error_and_project_direct<float>(m, error, q, p);
  }
  Tensor out = p, err = error;  // handles on the same memory
  if (err.defined()) err.add_(m);
  out.copy_(matmul(err.defined() ? err : m, q));
}

void project_back(const Tensor& input, const Tensor& p, const Tensor& q) {
  if (direct(input) && direct(p) && direct(q)) {
    if (input.dtype() == DType::f64) return project_back_direct<double>(input, p, q);
    return project_back_direct<float>(input, p, q);
  }
  Tensor out = q;
  out.copy_(matmul(input.t(), p));
}

void reconstruct(const Tensor& m, const Tensor& error, const Tensor& p, const Tensor& q) {
  if (direct(m) && direct(error) && direct(p) && direct(q)) {
    if (m.dtype() == DType::f64) return reconstruct_direct<double>(m, error, p, q);
    return reconstruct_direct<float>(m, error, p, q);
  }
  Tensor out = m, err = error;
  out.copy_(matmul(p, q.t()));
  if (err.defined()) err.sub_(out);
}

}  // namespace ddp::parallel::powersgd_detail
