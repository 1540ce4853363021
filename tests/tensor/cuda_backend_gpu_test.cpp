// The CUDA backend method by method: each test runs a Backend method on the
// GPU and on the CPU backend with the same inputs (same values, same strides)
// and compares. Every test needs a GPU and skips without one. The ops-level
// comparison lives in op_consistency_test.cpp; this file also reaches what
// the frontend rarely produces (odd strides, every dtype pair, undefined
// backward inputs, packed bmm operands).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_list.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/tensor.h"

namespace ddp {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason()

Backend& cpu() { return cpu_backend(); }
Backend& gpu() { return *cuda_backend(); }

const Device kGpu = Device::cuda(0);
const std::vector<DType> kFloating = {DType::f32, DType::f64, DType::f16, DType::bf16};
const std::vector<DType> kNumeric = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                     DType::i32, DType::i64, DType::u8};

// The same values on both devices, viewed with the same strides.
struct Both {
  Tensor c, g;
};

// Uniform values in [lo, hi] (rounded for integer dtypes, > mid for bool).
// transposed: the view is the transpose of a contiguous [.., n, m] tensor.
Both input(const Shape& shape, DType dt, double lo, double hi, uint32_t seed,
           bool transposed = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Shape base_shape = shape;
  if (transposed) std::swap(base_shape[base_shape.size() - 1], base_shape[base_shape.size() - 2]);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) {
    x = u(rng);
    if (dt == DType::bool_)
      x = x > (lo + hi) / 2 ? 1.0 : 0.0;
    else if (is_integral(dt))
      x = std::round(x);
  }
  Tensor c = Tensor::from_vector(v, base_shape, TensorOptions(dt));
  Tensor g = c.to(kGpu);
  if (transposed) return {c.transpose(-1, -2), g.transpose(-1, -2)};
  return {c, g};
}

Both empty(const Shape& shape, DType dt) {
  return {Tensor::empty(shape, TensorOptions(dt)),
          Tensor::empty(shape, TensorOptions(dt).device(kGpu))};
}

struct Tol {
  double rtol, atol;
};
Tol tol(DType dt) {
  switch (dt) {
    case DType::f64:
      return {1e-11, 1e-12};
    case DType::f32:
      return {1e-5, 1e-6};
    case DType::f16:
      return {2e-3, 1e-3};
    case DType::bf16:
      return {1.6e-2, 1e-2};
    default:
      return {0, 0};
  }
}

// Element by element; NaN equals NaN.
void expect_near(const Both& b, Tol t, const std::string& what) {
  ASSERT_EQ(b.c.shape(), b.g.shape()) << what;
  const std::vector<double> x = b.c.to_vector<double>(), y = b.g.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < x.size() && bad < 5; ++i) {
    const bool both_nan = std::isnan(x[i]) && std::isnan(y[i]);
    if (both_nan || x[i] == y[i]) continue;
    if (std::abs(x[i] - y[i]) <= t.atol + t.rtol * std::abs(x[i])) continue;
    ADD_FAILURE() << what << ": element " << i << " cpu " << x[i] << " cuda " << y[i];
    ++bad;
  }
}
void expect_equal(const Both& b, const std::string& what) { expect_near(b, {0, 0}, what); }

// Bit-exact comparison of the raw bytes (contiguous outputs).
void expect_same_bits(const Both& b, const std::string& what) {
  Tensor h = b.g.cpu();
  ASSERT_EQ(h.nbytes(), b.c.nbytes());
  EXPECT_EQ(std::memcmp(h.data_ptr(), b.c.data_ptr(), h.nbytes()), 0) << what;
}

std::string name_of(const char* op, DType dt) { return std::string(op) + " " + dtype_name(dt); }

TEST(CudaBackend, AllocateAndSynchronize) {
  REQUIRE_GPU();
  Storage s = gpu().allocate(1000, 0);
  EXPECT_NE(s.data(), nullptr);
  EXPECT_TRUE(s.device().is_cuda());
  EXPECT_EQ(gpu().type(), DeviceType::CUDA);
  gpu().synchronize(0);
}

// Tensor::to(device) keeps a dense layout, as torch's .to() does (Note
// [Memory-format propagation]); a strided view travels contiguous.
TEST(CudaBackend, DeviceCopiesKeepDenseLayouts) {
  REQUIRE_GPU();
  std::vector<float> v(2 * 3 * 4 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  Tensor nchw = Tensor::from_vector<float>(v, {2, 3, 4, 5});
  Tensor nhwc = nchw.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});  // channels-last
  Tensor on_gpu = nhwc.to(kGpu);
  EXPECT_EQ(on_gpu.strides(), nhwc.strides());
  Tensor back = on_gpu.cpu();
  EXPECT_EQ(back.strides(), nhwc.strides());
  EXPECT_EQ(back.to_vector<float>(), v);
  // A sliced view (not dense) arrives contiguous, with the view's values.
  Tensor view = nchw.select(1, 1);
  Tensor view_gpu = view.to(kGpu);
  EXPECT_TRUE(view_gpu.is_contiguous());
  EXPECT_EQ(view_gpu.to_vector<float>(), view.to_vector<float>());
}

TEST(CudaBackend, HostCopiesRoundTrip) {
  REQUIRE_GPU();
  for (bool non_blocking : {false, true}) {
    Tensor d = Tensor::empty({1000}, TensorOptions(DType::f32).device(kGpu));
    {
      std::vector<float> host(1000);
      for (int i = 0; i < 1000; ++i) host[size_t(i)] = float(i) * 0.5f;
      gpu().copy_from_host(host.data(), d, non_blocking);
      host.assign(1000, -1.0f);  // staged: overwriting or freeing at once is fine
    }
    std::vector<float> back(1000, 0.0f);
    gpu().copy_to_host(d, back.data(), non_blocking);
    if (non_blocking) gpu().synchronize(0);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(back[size_t(i)], float(i) * 0.5f) << non_blocking;
  }
}

TEST(CudaBackend, CopyCastsEveryDtypePairThroughStrides) {
  REQUIRE_GPU();
  for (DType s : kAllDTypes) {
    const Both src = input({13, 7}, s, -300, 300, 1, /*transposed=*/true);
    for (DType d : kAllDTypes) {
      Both dst = empty({13, 7}, d);
      cpu().copy(src.c, dst.c);
      gpu().copy(src.g, dst.g);
      expect_equal(dst, std::string("copy ") + dtype_name(s) + " -> " + dtype_name(d));
    }
  }
  // Same dtype, contiguous: the memcpy path; and a broadcast source.
  const Both src = input({4, 5}, DType::f32, -1, 1, 2);
  Both dst = empty({4, 5}, DType::f32);
  gpu().copy(src.g, dst.g);
  cpu().copy(src.c, dst.c);
  expect_same_bits(dst, "contiguous copy");
  const Both row = input({1, 5}, DType::f16, -1, 1, 3);
  Both out = empty({4, 5}, DType::f16);
  cpu().copy(row.c.expand({4, 5}), out.c);
  gpu().copy(row.g.expand({4, 5}), out.g);
  expect_same_bits(out, "broadcast copy");
}

TEST(CudaBackend, FillAndArange) {
  REQUIRE_GPU();
  for (DType dt : kAllDTypes) {
    for (double v : {2.5, -3.75, 0.0, 1e30}) {
      Both full = empty({3, 8}, dt);
      cpu().fill(full.c, v);
      gpu().fill(full.g, v);
      expect_same_bits(full, name_of("fill", dt) + " " + std::to_string(v));
    }
    // A strided view: only every other column is written.
    Both base = empty({4, 6}, dt);
    cpu().fill(base.c, 0);
    gpu().fill(base.g, 0);
    cpu().fill(base.c.slice(1, 0, 6, 2), 1);
    gpu().fill(base.g.slice(1, 0, 6, 2), 1);
    expect_same_bits(base, name_of("strided fill", dt));
  }
  for (DType dt : kNumeric) {
    Both r = empty({100}, dt);
    cpu().arange(r.c, -7.0, 0.3);
    gpu().arange(r.g, -7.0, 0.3);
    expect_same_bits(r, name_of("arange", dt));
  }
}

struct UnaryCase {
  UnaryOp op;
  const char* name;
  bool float_only;
};
const std::vector<UnaryCase> kUnaryOps = {
#define DDP_UNARY_ENTRY(name, Fn, float_only) {UnaryOp::name, #name, float_only},
    DDP_FOR_EACH_UNARY_OP(DDP_UNARY_ENTRY)
#undef DDP_UNARY_ENTRY
};
// log, sqrt and rsqrt want positive inputs.
bool positive_only(UnaryOp op) {
  return op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::rsqrt;
}

TEST(CudaBackend, UnaryMatchesCpu) {
  REQUIRE_GPU();
  for (const UnaryCase& u : kUnaryOps) {
    for (DType dt : u.float_only ? kFloating : kNumeric) {
      const double lo = positive_only(u.op) ? 0.1 : (dt == DType::u8 ? 0 : -3);
      const Both in = input({9, 33}, dt, lo, 3, 10, /*transposed=*/true);
      Both out = empty({9, 33}, dt);
      cpu().unary(u.op, in.c, out.c);
      gpu().unary(u.op, in.g, out.g);
      expect_near(out, tol(dt), name_of(u.name, dt));
    }
  }
}

TEST(CudaBackend, UnaryBackwardMatchesCpu) {
  REQUIRE_GPU();
  for (const UnaryCase& u : kUnaryOps) {
    for (DType dt : kFloating) {
      const double lo = positive_only(u.op) ? 0.1 : -3;
      const Both x = input({5, 40}, dt, lo, 3, 20);
      const Both dy = input({5, 40}, dt, -1, 1, 21, /*transposed=*/true);
      Both y = empty({5, 40}, dt);
      cpu().unary(u.op, x.c, y.c);
      gpu().copy_from_host(y.c.data_ptr(), y.g, false);  // the very same y on both
      Both dx = empty({5, 40}, dt);
      cpu().unary_backward(u.op, x.c, y.c, dy.c, dx.c);
      gpu().unary_backward(u.op, x.g, y.g, dy.g, dx.g);
      expect_near(dx, tol(dt), name_of(u.name, dt) + " backward");
    }
  }
  // A functor that ignores x (exp) may get an undefined x.
  const Both y = input({64}, DType::f32, 0.1, 2, 22);
  const Both dy = input({64}, DType::f32, -1, 1, 23);
  Both dx = empty({64}, DType::f32);
  cpu().unary_backward(UnaryOp::exp, Tensor(), y.c, dy.c, dx.c);
  gpu().unary_backward(UnaryOp::exp, Tensor(), y.g, dy.g, dx.g);
  expect_same_bits(dx, "exp backward without x");
}

TEST(CudaBackend, BinaryCompareWhereMatchCpu) {
  REQUIRE_GPU();
  const Shape shape = {6, 50};
  for (DType dt : kNumeric) {
    const double lo = dt == DType::u8 ? 0 : -4;
    const Both a = input(shape, dt, lo, 4, 30, /*transposed=*/true);
    const Both row = input({1, 50}, dt, lo, 4, 31);  // broadcast along dim 0 (stride 0)
    const Both b = {row.c.expand(shape), row.g.expand(shape)};
#define DDP_BINARY_CHECK(name, Fn)                 \
  {                                                \
    Both out = empty(shape, dt);                   \
    cpu().binary(BinaryOp::name, a.c, b.c, out.c); \
    gpu().binary(BinaryOp::name, a.g, b.g, out.g); \
    expect_near(out, tol(dt), name_of(#name, dt)); \
  }
    DDP_FOR_EACH_BINARY_OP(DDP_BINARY_CHECK)
#undef DDP_BINARY_CHECK
  }
  for (DType dt : kAllDTypes) {
    const Both a = input(shape, dt, 0, 3, 32);  // small integers: many ties
    const Both b = input(shape, dt, 0, 3, 33, /*transposed=*/true);
#define DDP_COMPARE_CHECK(name, Fn)                  \
  {                                                  \
    Both out = empty(shape, DType::bool_);           \
    cpu().compare(CompareOp::name, a.c, b.c, out.c); \
    gpu().compare(CompareOp::name, a.g, b.g, out.g); \
    expect_equal(out, name_of(#name, dt));           \
  }
    DDP_FOR_EACH_COMPARE_OP(DDP_COMPARE_CHECK)
#undef DDP_COMPARE_CHECK
    const Both cond = input(shape, DType::bool_, 0, 1, 34, /*transposed=*/true);
    Both out = empty(shape, dt);
    cpu().where(cond.c, a.c, b.c, out.c);
    gpu().where(cond.g, a.g, b.g, out.g);
    expect_equal(out, name_of("where", dt));
  }
}

TEST(CudaBackend, ReduceRowsMatchesCpu) {
  REQUIRE_GPU();
  const std::vector<Shape> shapes = {{7, 1000}, {300, 3}, {1, 5000}, {4, 1}};
  for (const Shape& shape : shapes) {
    const int64_t rows = shape[0], cols = shape[1];
    for (DType dt : kAllDTypes) {
      const double lo = is_floating(dt) ? -1 : 0;
      const Both in = input(shape, dt, lo, is_floating(dt) ? 1 : 5, 40);
      const std::string where = " [" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
      const bool int_sum = !is_floating(dt);
      Both sum = empty({rows}, int_sum ? DType::i64 : dt);
      cpu().reduce_rows(ReductionOp::sum, in.c, sum.c);
      gpu().reduce_rows(ReductionOp::sum, in.g, sum.g);
      Tol t = tol(dt);
      t.atol *= double(cols);  // sums in another order
      expect_near(sum, t, name_of("sum", dt) + where);
      for (ReductionOp op : {ReductionOp::max, ReductionOp::min}) {
        Both out = empty({rows}, dt);
        cpu().reduce_rows(op, in.c, out.c);
        gpu().reduce_rows(op, in.g, out.g);
        expect_equal(out, name_of(op_name(op), dt) + where);
      }
      for (ReductionOp op : {ReductionOp::argmax, ReductionOp::argmin}) {
        Both out = empty({rows}, DType::i64);
        cpu().reduce_rows(op, in.c, out.c);
        gpu().reduce_rows(op, in.g, out.g);
        expect_equal(out, name_of(op_name(op), dt) + where);
      }
    }
  }
  // NaN is the extreme, and the first NaN wins.
  std::vector<float> v(600, 1.0f);
  v[5] = 7.0f;
  v[300 + 17] = NAN;
  v[300 + 250] = NAN;
  Tensor c = Tensor::from_vector(v, {2, 300});
  const Both in = {c, c.to(kGpu)};
  for (ReductionOp op : {ReductionOp::argmax, ReductionOp::argmin, ReductionOp::max, ReductionOp::min}) {
    const bool arg = op == ReductionOp::argmax || op == ReductionOp::argmin;
    Both out = empty({2}, arg ? DType::i64 : DType::f32);
    cpu().reduce_rows(op, in.c, out.c);
    gpu().reduce_rows(op, in.g, out.g);
    expect_equal(out, std::string(op_name(op)) + " with NaN");
  }
}

TEST(CudaBackend, BmmMatchesCpuForEveryLayout) {
  REQUIRE_GPU();
  const int64_t B = 3, M = 17, K = 40, N = 9;
  for (DType dt : kFloating) {
    Tol t = tol(dt);
    t.atol = t.rtol * double(K) * 4;
    const Both a_row = input({B, M, K}, dt, -1, 1, 50);
    const Both a_col = input({B, M, K}, dt, -1, 1, 51, /*transposed=*/true);
    const Both b_row = input({B, K, N}, dt, -1, 1, 52);
    const Both b_col = input({B, K, N}, dt, -1, 1, 53, /*transposed=*/true);
    const Both b_one = input({1, K, N}, dt, -1, 1, 54);
    const Both b_bcast = {b_one.c.expand({B, K, N}), b_one.g.expand({B, K, N})};  // batch stride 0
    const Both wide = input({B, M, 2 * K}, dt, -1, 1, 55);
    const Both a_step = {wide.c.slice(2, 0, 2 * K, 2), wide.g.slice(2, 0, 2 * K, 2)};  // packed
    const std::vector<std::pair<std::string, std::pair<const Both*, const Both*>>> cases = {
        {"row x row", {&a_row, &b_row}},     {"row x col", {&a_row, &b_col}},
        {"col x row", {&a_col, &b_row}},     {"col x col", {&a_col, &b_col}},
        {"row x bcast", {&a_row, &b_bcast}}, {"step x row", {&a_step, &b_row}}};
    for (const auto& [label, ab] : cases) {
      Both out = empty({B, M, N}, dt);
      cpu().bmm(ab.first->c, ab.second->c, out.c);
      gpu().bmm(ab.first->g, ab.second->g, out.g);
      expect_near(out, t, name_of("bmm", dt) + " " + label);
    }
  }
  // Degenerate sizes: K == 0 gives zeros; M == 1 / N == 1 exercise the ld fix-ups.
  const Both a0 = input({2, 3, 0}, DType::f32, -1, 1, 56),
             b0 = input({2, 0, 4}, DType::f32, -1, 1, 57);
  Both z = empty({2, 3, 4}, DType::f32);
  cpu().bmm(a0.c, b0.c, z.c);
  gpu().bmm(a0.g, b0.g, z.g);
  expect_equal(z, "bmm K=0");
  const Both a1 = input({2, 1, 5}, DType::f32, -1, 1, 58),
             b1 = input({2, 5, 1}, DType::f32, -1, 1, 59);
  Both o1 = empty({2, 1, 1}, DType::f32);
  cpu().bmm(a1.c, b1.c, o1.c);
  gpu().bmm(a1.g, b1.g, o1.g);
  expect_near(o1, tol(DType::f32), "bmm M=N=1");
}

TEST(CudaBackend, SoftmaxMatchesCpu) {
  REQUIRE_GPU();
  for (const Shape& shape : std::vector<Shape>{{5, 1000}, {300, 7}, {2, 1}}) {
    for (DType dt : kFloating) {
      for (bool log : {false, true}) {
        const std::string what = name_of(log ? "log_softmax" : "softmax", dt);
        const Both in = input(shape, dt, -5, 5, 60);
        Both y = empty(shape, dt);
        kernels::call<kernels::softmax_forward>(in.c.device(), in.c, y.c, log);
        kernels::call<kernels::softmax_forward>(in.g.device(), in.g, y.g, log);
        expect_near(y, tol(dt), what);
        // Backward from the CPU's y on both devices.
        gpu().copy_from_host(y.c.data_ptr(), y.g, false);
        const Both dy = input(shape, dt, -1, 1, 61);
        Both dx = empty(shape, dt);
        kernels::call<kernels::softmax_backward>(y.c.device(), y.c, dy.c, dx.c, log);
        kernels::call<kernels::softmax_backward>(y.g.device(), y.g, dy.g, dx.g, log);
        Tol t = tol(dt);
        t.atol *= 10;
        expect_near(dx, t, what + " backward");
      }
    }
  }
}

TEST(CudaBackend, RandomMatchesCpu) {
  REQUIRE_GPU();
  const uint64_t seed = 1234, counter = 999;
  for (DType dt : kFloating) {
    Both u = empty({4097}, dt);
    cpu().random(u.c, Backend::Distribution::uniform, -2.0, 3.0, seed, counter);
    gpu().random(u.g, Backend::Distribution::uniform, -2.0, 3.0, seed, counter);
    expect_same_bits(u, name_of("uniform", dt));  // Note [Random formulas]: bit-identical
    Both n = empty({4097}, dt);
    cpu().random(n.c, Backend::Distribution::normal, 0.5, 2.0, seed, counter);
    gpu().random(n.g, Backend::Distribution::normal, 0.5, 2.0, seed, counter);
    Tol t = tol(dt);
    t.atol = std::max(t.atol, 1e-5);
    expect_near(n, t, name_of("normal", dt));
  }
  // Element i depends only on counter + i: a shifted run is a suffix.
  Tensor whole = Tensor::empty({100}, TensorOptions(DType::f32).device(kGpu));
  Tensor tail = Tensor::empty({90}, TensorOptions(DType::f32).device(kGpu));
  gpu().random(whole, Backend::Distribution::normal, 0, 1, seed, 0);
  gpu().random(tail, Backend::Distribution::normal, 0, 1, seed, 10);
  const std::vector<float> w = whole.to_vector<float>(), t = tail.to_vector<float>();
  for (size_t i = 0; i < t.size(); ++i) ASSERT_EQ(w[i + 10], t[i]) << i;
}

TEST(CudaBackend, GatherAndScatterAddMatchCpu) {
  REQUIRE_GPU();
  for (DType idt : {DType::i32, DType::i64}) {
    for (int64_t dim : {0, 1, -1}) {
      const int64_t d = dim < 0 ? dim + 2 : dim;
      const Shape in_shape = {6, 8};
      Shape idx_shape = {4, 5};
      const int64_t extent = in_shape[size_t(d)];
      const Both index = input(idx_shape, idt, 0, double(extent - 1), 70);
      for (DType dt : kAllDTypes) {
        const std::string what =
            name_of("gather", dt) + " index " + dtype_name(idt) + " dim " + std::to_string(dim);
        const Both in = input(in_shape, dt, -5, 5, 71, /*transposed=*/true);
        Both out = empty(idx_shape, dt);
        cpu().gather(in.c, dim, index.c, out.c);
        gpu().gather(in.g, dim, index.g, out.g);
        expect_equal(out, what);
        if (dt == DType::bool_) continue;
        // scatter_add: duplicate indices accumulate (atomics on the GPU).
        const Both src = input(idx_shape, dt, dt == DType::u8 ? 0 : -5, 5, 72);
        Both acc = empty(in_shape, dt);
        cpu().fill(acc.c, 1);
        gpu().fill(acc.g, 1);
        cpu().scatter_add(acc.c, dim, index.c, src.c);
        gpu().scatter_add(acc.g, dim, index.g, src.g);
        Tol t = tol(dt);
        t.atol = t.rtol * 40;  // up to 4 additions of values <= 5, in another order
        expect_near(acc, t, "scatter_add" + what.substr(6));
      }
    }
  }
  // A broadcast index (stride 0) into many duplicate targets.
  const Both one = input({1, 1}, DType::i64, 2, 2, 73);
  const Both index = {one.c.expand({64, 1}), one.g.expand({64, 1})};
  const Both src = input({64, 1}, DType::f32, 0, 1, 74);
  Both acc = empty({4, 1}, DType::f32);
  cpu().fill(acc.c, 0);
  gpu().fill(acc.g, 0);
  cpu().scatter_add(acc.c, 0, index.c, src.c);
  gpu().scatter_add(acc.g, 0, index.g, src.g);
  expect_near(acc, {1e-5, 1e-5}, "scatter_add with a broadcast index");
}

}  // namespace
}  // namespace ddp
