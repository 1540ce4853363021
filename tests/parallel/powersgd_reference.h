#pragma once
// An independent f64 reference of PowerSGD on one bucket (plain loops), and
// helpers to drive the hook on hand-made buckets; shared by
// powersgd_test.cpp (thread ranks) and multi/powersgd_main.cpp (processes).

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ddp/parallel/powersgd.h"
#include "ddp/tensor/ops.h"

namespace ddp::test::powersgd {

using parallel::BucketWork;
using parallel::CommHook;
using parallel::GradBucket;

// A bucket of f64 gradients with the given shapes, views into one buffer.
inline GradBucket make_bucket(const std::vector<Shape>& shapes, int index = 0, bool is_last = true) {
  int64_t total = 0;
  for (const Shape& s : shapes) total += shape_numel(s);
  GradBucket b;
  b.index = index;
  b.is_last = is_last;
  b.buffer = Tensor::zeros({total}, DType::f64);
  int64_t offset = 0;
  for (const Shape& s : shapes) {
    b.gradients.push_back(b.buffer.narrow(0, offset, shape_numel(s)).view(s));
    offset += shape_numel(s);
  }
  return b;
}

// Rank r's gradient at iteration t, as a flat f64 vector.
inline std::vector<double> gradient_values(int64_t numel, int rank, int iter) {
  Generator gen(1000 + 37 * uint64_t(rank) + 7919 * uint64_t(iter));
  return randn({numel}, TensorOptions(DType::f64), &gen).to_vector<double>();
}

// Runs the hook on one bucket as the DDP engine would: call, wait, finish.
inline void reduce(CommHook& hook, dist::ProcessGroup& group, GradBucket& bucket) {
  BucketWork work = hook(group, bucket);
  if (work.work) work.work->wait();
  if (work.finish) work.finish();
}

// ---- the reference: one bucket, plain f64 loops -------------------------

using Matrix = std::vector<double>;  // row-major

inline void gram_schmidt(Matrix& a, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < cols; ++i) {
    double norm = 0;
    for (int64_t k = 0; k < rows; ++k) norm += a[k * cols + i] * a[k * cols + i];
    norm = std::sqrt(norm);
    for (int64_t k = 0; k < rows; ++k) a[k * cols + i] /= norm;
    for (int64_t j = i + 1; j < cols; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < rows; ++k) dot += a[k * cols + i] * a[k * cols + j];
      for (int64_t k = 0; k < rows; ++k) a[k * cols + j] -= dot * a[k * cols + i];
    }
  }
}

struct RefTensor {
  int64_t n, m, r;  // r = 0: not compressed
  Matrix q;         // m x r
  std::vector<Matrix> error;  // per rank, n x m
};

class Reference {
 public:
  Reference(const std::vector<Shape>& shapes, int world, int64_t rank, double min_rate,
            bool error_feedback, bool warm_start, uint64_t seed)
      : world_(world), error_feedback_(error_feedback), warm_start_(warm_start), generator_(seed) {
    for (const Shape& s : shapes) {
      const int64_t numel = shape_numel(s), n = s.size() == 0 ? 1 : s[0], m = numel / n;
      const int64_t r = std::min({n, m, rank});
      const bool worth = double((n + m) * r) * min_rate < double(numel);
      tensors_.push_back({n, m, worth ? r : 0, {}, std::vector<Matrix>(world, Matrix(numel, 0.0))});
      if (worth) q_size_ += m * r;
    }
  }

  // inputs[rank][tensor]: the gradients; returns the result (same on every rank).
  std::vector<Matrix> step(const std::vector<std::vector<Matrix>>& inputs) {
    if (q_size_ > 0 && (!warm_start_ || !have_q_)) draw_q();
    have_q_ = true;
    std::vector<Matrix> out;
    for (size_t k = 0; k < tensors_.size(); ++k) {
      RefTensor& t = tensors_[k];
      const int64_t n = t.n, m = t.m, r = t.r;
      Matrix result(n * m, 0.0);
      if (r == 0) {
        for (int w = 0; w < world_; ++w)
          for (int64_t i = 0; i < n * m; ++i) result[i] += inputs[w][k][i] / world_;
        out.push_back(result);
        continue;
      }
      std::vector<Matrix> mats(world_);
      for (int w = 0; w < world_; ++w) {
        mats[w] = inputs[w][k];
        if (error_feedback_)
          for (int64_t i = 0; i < n * m; ++i) mats[w][i] += t.error[w][i];
      }
      gram_schmidt(t.q, m, r);
      Matrix p(n * r, 0.0);  // sum over ranks of M Q
      for (int w = 0; w < world_; ++w)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c = 0; c < r; ++c)
            for (int64_t j = 0; j < m; ++j) p[i * r + c] += mats[w][i * m + j] * t.q[j * r + c];
      gram_schmidt(p, n, r);
      Matrix q(m * r, 0.0);  // average over ranks of M^T P
      for (int w = 0; w < world_; ++w)
        for (int64_t j = 0; j < m; ++j)
          for (int64_t c = 0; c < r; ++c)
            for (int64_t i = 0; i < n; ++i) q[j * r + c] += mats[w][i * m + j] * p[i * r + c] / world_;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j)
          for (int64_t c = 0; c < r; ++c) result[i * m + j] += p[i * r + c] * q[j * r + c];
      if (error_feedback_)
        for (int w = 0; w < world_; ++w)
          for (int64_t i = 0; i < n * m; ++i) t.error[w][i] = mats[w][i] - result[i];
      t.q = q;
      out.push_back(result);
    }
    return out;
  }

  const std::vector<RefTensor>& tensors() const { return tensors_; }

 private:
  // The hook's initial Q: one f32 draw of every Q of the bucket, in order.
  void draw_q() {
    std::vector<float> all = randn({q_size_}, TensorOptions(DType::f32), &generator_).to_vector<float>();
    size_t offset = 0;
    for (RefTensor& t : tensors_) {
      if (t.r == 0) continue;
      t.q.assign(all.begin() + long(offset), all.begin() + long(offset + size_t(t.m * t.r)));
      offset += size_t(t.m * t.r);
    }
  }

  int world_;
  bool error_feedback_, warm_start_;
  Generator generator_;
  std::vector<RefTensor> tensors_;
  int64_t q_size_ = 0;
  bool have_q_ = false;
};

inline void expect_near(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-9 * (1 + std::abs(want[i]))) << what << " element " << i;
}

}  // namespace ddp::test::powersgd
