// Tests of the CPU kernels with their own shape (reductions, bmm, softmax,
// random, gather/scatter_add), called through cpu_backend() directly on small
// hand-made tensors. Expected values are computed by hand.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel_list.h"
#include "ddp/core/error.h"
#include "ddp/tensor/generator.h"
#include "tensor/cpu_backend_test_util.h"

namespace ddp {
namespace {

using namespace cpu_test;

// ---------------------------------------------------------------- reductions

TEST(CpuBackendReduce, SumDTypes) {
  Tensor f = make<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor fo = empty(DType::f32, {2});
  be().reduce_rows(ReductionOp::sum, f, fo);
  EXPECT_EQ(values<float>(fo), (std::vector<float>{6, 15}));

  // Integers accumulate in i64 and the output is i64.
  Tensor i = make<int32_t>({1, -2, 3, 2147483647, 1, 0}, {2, 3});
  Tensor io = empty(DType::i64, {2});
  be().reduce_rows(ReductionOp::sum, i, io);
  EXPECT_EQ(values<int64_t>(io), (std::vector<int64_t>{2, 2147483648LL}));
  Tensor u = make<uint8_t>({200, 100}, {1, 2});
  Tensor uo = empty(DType::i64, {1});
  be().reduce_rows(ReductionOp::sum, u, uo);
  EXPECT_EQ(values<int64_t>(uo)[0], 300);
  Tensor b = make_bool({1, 0, 1, 1, 1, 1}, {2, 3});
  Tensor bo = empty(DType::i64, {2});
  be().reduce_rows(ReductionOp::sum, b, bo);
  EXPECT_EQ(values<int64_t>(bo), (std::vector<int64_t>{2, 3}));

  Tensor h = make<Half>({Half(1.0f), Half(2.0f), Half(0.5f)}, {1, 3});
  Tensor ho = empty(DType::f16, {1});
  be().reduce_rows(ReductionOp::sum, h, ho);
  EXPECT_EQ(as_float<Half>(ho)[0], 3.5f);

  // Empty rows sum to 0; zero rows do nothing.
  Tensor e = make<float>({}, {2, 0});
  Tensor eo = empty(DType::f32, {2});
  be().reduce_rows(ReductionOp::sum, e, eo);
  EXPECT_EQ(values<float>(eo), (std::vector<float>{0, 0}));
  be().reduce_rows(ReductionOp::max, make<float>({}, {0, 3}), make<float>({}, {0}));
}

TEST(CpuBackendReduce, LongRowsSumPairwise) {
  // 1 + 2 + ... + 1000 = 500500: every partial sum is exact in f32.
  std::vector<float> v(1000);
  for (int i = 0; i < 1000; ++i) v[size_t(i)] = float(i + 1);
  Tensor o = empty(DType::f32, {1});
  be().reduce_rows(ReductionOp::sum, make<float>(v, {1, 1000}), o);
  EXPECT_EQ(values<float>(o)[0], 500500.0f);
  // 2^24 + 1 ones: a running f32 sum would stall at 2^24.
  const int64_t n = (int64_t(1) << 24) + 8;
  std::vector<float> ones(size_t(n), 1.0f);
  be().reduce_rows(ReductionOp::sum, make<float>(ones, {1, n}), o);
  EXPECT_EQ(values<float>(o)[0], float(n));
}

TEST(CpuBackendReduce, MaxMinAndNaN) {
  Tensor f = make<float>({1, kNaN, 3, -1, -5, 2}, {2, 3});
  Tensor o = empty(DType::f32, {2});
  be().reduce_rows(ReductionOp::max, f, o);
  EXPECT_TRUE(std::isnan(values<float>(o)[0]));
  EXPECT_EQ(values<float>(o)[1], 2.0f);
  be().reduce_rows(ReductionOp::min, f, o);
  EXPECT_TRUE(std::isnan(values<float>(o)[0]));
  EXPECT_EQ(values<float>(o)[1], -5.0f);

  Tensor i = make<int32_t>({-3, 7, 7}, {1, 3});
  Tensor io = empty(DType::i32, {1});
  be().reduce_rows(ReductionOp::max, i, io);
  EXPECT_EQ(values<int32_t>(io)[0], 7);
  be().reduce_rows(ReductionOp::min, i, io);
  EXPECT_EQ(values<int32_t>(io)[0], -3);
  Tensor b = make_bool({0, 1, 0, 0}, {2, 2});
  Tensor bo = empty(DType::bool_, {2});
  be().reduce_rows(ReductionOp::max, b, bo);
  EXPECT_EQ(values<uint8_t>(bo), (std::vector<uint8_t>{1, 0}));
}

TEST(CpuBackendReduce, ArgFirstIndexAndNaN) {
  Tensor f = make<float>({1, 3, 3, 0, 1, kNaN, 5, kNaN, 2, 1, 1, 4}, {3, 4});
  Tensor o = empty(DType::i64, {3});
  be().reduce_rows(ReductionOp::argmax, f, o);
  EXPECT_EQ(values<int64_t>(o), (std::vector<int64_t>{1, 1, 3}));  // ties: first; NaN is the max
  be().reduce_rows(ReductionOp::argmin, f, o);
  EXPECT_EQ(values<int64_t>(o), (std::vector<int64_t>{3, 1, 1}));  // NaN is also the min

  Tensor h = make<Half>({Half(-1.0f), Half(-0.5f), Half(-0.5f)}, {1, 3});
  Tensor ho = empty(DType::i64, {1});
  be().reduce_rows(ReductionOp::argmax, h, ho);
  EXPECT_EQ(values<int64_t>(ho)[0], 1);
  Tensor i = make<int64_t>({4, -9, -9}, {1, 3});
  be().reduce_rows(ReductionOp::argmin, i, ho);
  EXPECT_EQ(values<int64_t>(ho)[0], 1);
}

// ---------------------------------------------------------------- bmm

// a = [[1,2,3],[4,5,6]], b = [[7,8],[9,10],[11,12]]: a @ b = [[58,64],[139,154]].
const std::vector<float> kA = {1, 2, 3, 4, 5, 6};
const std::vector<float> kAT = {1, 4, 2, 5, 3, 6};
const std::vector<float> kB = {7, 8, 9, 10, 11, 12};
const std::vector<float> kBT = {7, 9, 11, 8, 10, 12};
const std::vector<float> kAB = {58, 64, 139, 154};

TEST(CpuBackendBmm, LayoutsF32) {
  Tensor out = empty(DType::f32, {1, 2, 2});
  be().bmm(make<float>(kA, {1, 2, 3}), make<float>(kB, {1, 3, 2}), out);
  EXPECT_EQ(values<float>(out), kAB);
  // a column-major (a transposed view), b row-major.
  be().bmm(make<float>(kAT, {1, 2, 3}, {6, 1, 2}), make<float>(kB, {1, 3, 2}), out);
  EXPECT_EQ(values<float>(out), kAB);
  // both column-major.
  be().bmm(make<float>(kAT, {1, 2, 3}, {6, 1, 2}), make<float>(kBT, {1, 3, 2}, {6, 1, 3}), out);
  EXPECT_EQ(values<float>(out), kAB);
  // a row-major with padded rows (row stride 4).
  be().bmm(make<float>({1, 2, 3, 0, 4, 5, 6, 0}, {1, 2, 3}, {8, 4, 1}),
           make<float>(kBT, {1, 3, 2}, {6, 1, 3}), out);
  EXPECT_EQ(values<float>(out), kAB);
  // A broadcast row (stride 0 inside the matrix) must be packed.
  be().bmm(make<float>({1, 2, 3}, {1, 2, 3}, {3, 0, 1}), make<float>(kB, {1, 3, 2}), out);
  EXPECT_EQ(values<float>(out), (std::vector<float>{58, 64, 58, 64}));
}

TEST(CpuBackendBmm, BatchStrideZero) {
  // Two batches of a ([a, 2a]) against one shared b (batch stride 0).
  std::vector<float> a2 = kA;
  for (float x : kA) a2.push_back(2 * x);
  Tensor out = empty(DType::f32, {2, 2, 2});
  be().bmm(make<float>(a2, {2, 2, 3}), make<float>(kB, {2, 3, 2}, {0, 2, 1}), out);
  EXPECT_EQ(values<float>(out), (std::vector<float>{58, 64, 139, 154, 116, 128, 278, 308}));

  // One shared a (batch stride 0, column-major) against [b, -b].
  std::vector<float> b2 = kB;
  for (float x : kB) b2.push_back(-x);
  be().bmm(make<float>(kAT, {2, 2, 3}, {0, 1, 2}), make<float>(b2, {2, 3, 2}), out);
  EXPECT_EQ(values<float>(out), (std::vector<float>{58, 64, 139, 154, -58, -64, -139, -154}));

  // M == 1 rows folded into one gemm: batches [1,2,3] and [4,5,6].
  Tensor o1 = empty(DType::f32, {2, 1, 2});
  be().bmm(make<float>(kA, {2, 1, 3}), make<float>(kBT, {2, 3, 2}, {0, 1, 3}), o1);
  EXPECT_EQ(values<float>(o1), kAB);

  // Both shared, packed b (broadcast column): b[k][n] = [7, 9, 11][k].
  Tensor o2 = empty(DType::f32, {2, 2, 2});
  be().bmm(make<float>(kA, {2, 2, 3}, {0, 3, 1}), make<float>({7, 9, 11}, {2, 3, 2}, {0, 1, 0}),
           o2);
  EXPECT_EQ(values<float>(o2), (std::vector<float>{58, 58, 139, 139, 58, 58, 139, 139}));
}

TEST(CpuBackendBmm, OtherDTypes) {
  std::vector<double> ad(kAT.begin(), kAT.end()), bd(kB.begin(), kB.end());
  Tensor od = empty(DType::f64, {1, 2, 2});
  be().bmm(make<double>(ad, {1, 2, 3}, {6, 1, 2}), make<double>(bd, {1, 3, 2}), od);
  EXPECT_EQ(values<double>(od), (std::vector<double>{58, 64, 139, 154}));

  std::vector<Half> ah(kA.begin(), kA.end()), bh(kBT.begin(), kBT.end());
  Tensor oh = empty(DType::f16, {2, 2, 2});
  be().bmm(make<Half>(ah, {2, 2, 3}, {0, 3, 1}), make<Half>(bh, {2, 3, 2}, {0, 1, 3}), oh);
  EXPECT_EQ(as_float<Half>(oh), (std::vector<float>{58, 64, 139, 154, 58, 64, 139, 154}));

  std::vector<BFloat16> ab(kA.begin(), kA.end()), bb(kB.begin(), kB.end());
  Tensor ob = empty(DType::bf16, {1, 2, 2});
  be().bmm(make<BFloat16>(ab, {1, 2, 3}), make<BFloat16>(bb, {1, 3, 2}), ob);
  EXPECT_EQ(as_float<BFloat16>(ob), kAB);
  // f16 accumulates in f32: 2048 + 1 + 1 would stay 2048 if summed in half.
  Tensor oa = empty(DType::f16, {1, 1, 1});
  be().bmm(make<Half>({Half(2048.0f), Half(1.0f), Half(1.0f)}, {1, 1, 3}),
           make<Half>({Half(1.0f), Half(1.0f), Half(1.0f)}, {1, 3, 1}), oa);
  EXPECT_EQ(as_float<Half>(oa)[0], 2050.0f);

  try {
    be().bmm(make<int32_t>({1}, {1, 1, 1}), make<int32_t>({1}, {1, 1, 1}),
             empty(DType::i32, {1, 1, 1}));
    FAIL() << "expected DTypeError";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("bmm"), std::string::npos) << e.what();
  }
}

TEST(CpuBackendBmm, EmptyInnerDimGivesZeros) {
  Tensor out = empty(DType::f32, {2, 2, 3});  // filled with a marker pattern
  be().bmm(make<float>({}, {2, 2, 0}), make<float>({}, {2, 0, 3}), out);
  EXPECT_EQ(values<float>(out), std::vector<float>(12, 0.0f));
}

// ---------------------------------------------------------------- softmax
// (registered kernels since softmax left the Backend; Note [Kernel registry])

void softmax_rows(const Tensor& in, const Tensor& out, bool log) {
  kernels::call<kernels::softmax_forward>(Device::cpu(), in, out, log);
}
void softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
  kernels::call<kernels::softmax_backward>(Device::cpu(), y, dy, dx, log);
}

TEST(CpuBackendSoftmax, ForwardValues) {
  Tensor in = make<float>({0.0f, std::log(3.0f), 1000.0f, 1000.0f, -kInf, -kInf}, {3, 2});
  Tensor out = empty(DType::f32, {3, 2});
  softmax_rows(in, out, false);
  auto v = values<float>(out);
  EXPECT_NEAR(v[0], 0.25f, 1e-6);
  EXPECT_NEAR(v[1], 0.75f, 1e-6);
  EXPECT_EQ(v[2], 0.5f);  // stable for large inputs
  EXPECT_EQ(v[3], 0.5f);
  EXPECT_TRUE(std::isnan(v[4]));  // all -inf: NaN like torch
  softmax_rows(in, out, true);
  v = values<float>(out);
  EXPECT_NEAR(v[0], -std::log(4.0f), 1e-6);
  EXPECT_NEAR(v[1], std::log(0.75f), 1e-6);
  EXPECT_NEAR(v[2], -std::log(2.0f), 1e-6);

  Tensor h = make<Half>({Half(0.0f), Half(0.0f), Half(0.0f), Half(0.0f)}, {1, 4});
  Tensor ho = empty(DType::f16, {1, 4});
  softmax_rows(h, ho, false);
  EXPECT_EQ(as_float<Half>(ho), (std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f}));
  Tensor d = make<double>({1.0, 1.0}, {1, 2});
  Tensor dout = empty(DType::f64, {1, 2});
  softmax_rows(d, dout, true);
  EXPECT_NEAR(values<double>(dout)[0], -std::log(2.0), 1e-15);

  // A long row (beyond the 8-lane blocks).
  std::vector<float> z(37, 0.0f);
  Tensor lo = empty(DType::f32, {1, 37});
  softmax_rows(make<float>(z, {1, 37}), lo, false);
  for (float x : values<float>(lo)) EXPECT_NEAR(x, 1.0f / 37, 1e-8);
  EXPECT_THROW(softmax_rows(make<int32_t>({1}, {1, 1}), empty(DType::i32, {1, 1}), false),
               DTypeError);
}

TEST(CpuBackendSoftmax, Backward) {
  Tensor y = make<float>({0.25f, 0.75f}, {1, 2});
  Tensor dy = make<float>({1.0f, 0.0f}, {1, 2});
  Tensor dx = empty(DType::f32, {1, 2});
  softmax_rows_backward(y, dy, dx, false);  // y * (dy - sum(dy * y))
  EXPECT_EQ(values<float>(dx), (std::vector<float>{0.1875f, -0.1875f}));

  Tensor ly = make<float>({std::log(0.25f), std::log(0.75f)}, {1, 2});
  Tensor ones = make<float>({1.0f, 1.0f}, {1, 2});
  softmax_rows_backward(ly, ones, dx, true);  // dy - exp(y) * sum(dy)
  EXPECT_NEAR(values<float>(dx)[0], 0.5f, 1e-6);
  EXPECT_NEAR(values<float>(dx)[1], -0.5f, 1e-6);

  Tensor yb = make<BFloat16>({BFloat16(0.25f), BFloat16(0.75f)}, {1, 2});
  Tensor dyb = make<BFloat16>({BFloat16(1.0f), BFloat16(0.0f)}, {1, 2});
  Tensor dxb = empty(DType::bf16, {1, 2});
  softmax_rows_backward(yb, dyb, dxb, false);
  EXPECT_EQ(as_float<BFloat16>(dxb), (std::vector<float>{0.1875f, -0.1875f}));
}

// ---------------------------------------------------------------- random

TEST(CpuBackendRandom, PhiloxKnownAnswer) {
  // Random123's known-answer test for philox4x32-10 with counter 0 and key 0.
  uint32_t w[4];
  Philox4x32::draw(0, 0, w);
  EXPECT_EQ(w[0], 0x6627e8d5u);
  EXPECT_EQ(w[1], 0xe169c58du);
  EXPECT_EQ(w[2], 0xbc57ac4cu);
  EXPECT_EQ(w[3], 0x9b00dbd8u);
  Tensor u = empty(DType::f32, {1});
  be().random(u, Backend::Distribution::uniform, 0, 1, 0, 0);
  EXPECT_EQ(values<float>(u)[0], float(0x6627e8d5u >> 8) / 16777216.0f);
}

TEST(CpuBackendRandom, DeterministicAndCounterShifts) {
  Tensor a = empty(DType::f32, {8});
  Tensor b = empty(DType::f32, {8});
  be().random(a, Backend::Distribution::uniform, -2, 3, 42, 100);
  be().random(b, Backend::Distribution::uniform, -2, 3, 42, 100);
  EXPECT_EQ(values<float>(a), values<float>(b));
  for (float x : values<float>(a)) {
    EXPECT_GE(x, -2.0f);
    EXPECT_LT(x, 3.0f);
  }
  // Counter c + i for element i: starting 3 later shifts the sequence by 3.
  Tensor c = empty(DType::f32, {5});
  be().random(c, Backend::Distribution::uniform, -2, 3, 42, 103);
  auto va = values<float>(a), vc = values<float>(c);
  EXPECT_EQ(std::vector<float>(va.begin() + 3, va.end()), vc);
  // Element i is exactly a + (b - a) * u(counter + i).
  uint32_t w[4];
  Philox4x32::draw(42, 105, w);
  EXPECT_EQ(vc[2], -2.0f + 5.0f * Philox4x32::to_unit_float(w[0]));
  // Another seed gives other numbers.
  be().random(b, Backend::Distribution::uniform, -2, 3, 43, 100);
  EXPECT_NE(values<float>(a), values<float>(b));

  Tensor n1 = empty(DType::f64, {6}), n2 = empty(DType::f64, {4});
  be().random(n1, Backend::Distribution::normal, 0, 1, 7, 0);
  be().random(n2, Backend::Distribution::normal, 0, 1, 7, 2);
  auto v1 = values<double>(n1);
  EXPECT_EQ(std::vector<double>(v1.begin() + 2, v1.end()), values<double>(n2));
  Philox4x32::draw(7, 0, w);
  EXPECT_EQ(v1[0], std::sqrt(-2.0 * std::log(1.0 - Philox4x32::to_unit_double(w[0], w[1]))) *
                       std::cos(6.283185307179586 * Philox4x32::to_unit_double(w[2], w[3])));
}

TEST(CpuBackendRandom, DistributionsAndDTypes) {
  const int64_t n = 20000;
  Tensor x = empty(DType::f32, {n});
  be().random(x, Backend::Distribution::normal, 1.0, 2.0, 123, 0);
  double sum = 0, sq = 0;
  for (float v : values<float>(x)) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sq += double(v) * v;
  }
  const double mean = sum / n, stddev = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(stddev, 2.0, 0.05);

  Tensor d = empty(DType::f64, {n});
  be().random(d, Backend::Distribution::uniform, 0, 1, 5, 0);
  double dsum = 0;
  for (double v : values<double>(d)) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    dsum += v;
  }
  EXPECT_NEAR(dsum / n, 0.5, 0.01);
  uint32_t w[4];
  Philox4x32::draw(5, 17, w);
  EXPECT_EQ(values<double>(d)[17], Philox4x32::to_unit_double(w[0], w[1]));

  Tensor h = empty(DType::f16, {64});
  be().random(h, Backend::Distribution::uniform, 2, 4, 9, 0);
  Tensor hf = empty(DType::f32, {64});
  be().random(hf, Backend::Distribution::uniform, 2, 4, 9, 0);
  auto vh = as_float<Half>(h), vf = values<float>(hf);
  for (size_t i = 0; i < vh.size(); ++i) EXPECT_EQ(vh[i], float(Half(vf[i])));  // rounded once
  EXPECT_THROW(be().random(empty(DType::i32, {2}), Backend::Distribution::uniform, 0, 1, 0, 0),
               DTypeError);
}

// ---------------------------------------------------------------- gather / scatter_add

TEST(CpuBackendIndex, Gather) {
  Tensor in = make<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor out = empty(DType::f32, {2, 2});
  be().gather(in, 1, make<int64_t>({2, 0, 1, 1}, {2, 2}), out);
  EXPECT_EQ(values<float>(out), (std::vector<float>{3, 1, 5, 5}));
  be().gather(in, -1, make<int64_t>({2, 0}, {2, 2}, {0, 1}), out);  // index broadcast over rows
  EXPECT_EQ(values<float>(out), (std::vector<float>{3, 1, 6, 4}));

  Tensor o0 = empty(DType::f32, {1, 3});
  be().gather(in, 0, make<int32_t>({1, 0, 1}, {1, 3}), o0);
  EXPECT_EQ(values<float>(o0), (std::vector<float>{4, 2, 6}));

  // in larger than index along the other dim; transposed in; f16.
  std::vector<Half> raw;
  for (int i = 0; i < 9; ++i) raw.push_back(Half(float(i)));
  Tensor t = make<Half>(raw, {3, 3}, {1, 3});  // t[i][j] = 3j + i
  Tensor ho = empty(DType::f16, {2, 1});
  be().gather(t, 1, make<int64_t>({2, 0}, {2, 1}), ho);
  EXPECT_EQ(as_float<Half>(ho), (std::vector<float>{6, 1}));
}

TEST(CpuBackendIndex, ScatterAddDuplicates) {
  Tensor out = make<float>({0, 0, 0, 0, 0}, {5});
  be().scatter_add(out, 0, make<int64_t>({0, 1, 0, 4, 0}, {5}), make<float>({1, 2, 3, 4, 5}, {5}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{9, 2, 0, 0, 4}));

  Tensor o2 = make<int64_t>({0, 0, 0, 0, 0, 0}, {2, 3});
  be().scatter_add(o2, 0, make<int32_t>({0, 1, 0, 0, 0, 1}, {2, 3}),
                   make<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_EQ(values<int64_t>(o2), (std::vector<int64_t>{5, 5, 3, 0, 2, 6}));

  // Broadcast src (stride 0) into f16, accumulating in f32 per step.
  Tensor oh = make<Half>({Half(1.0f), Half(0.0f)}, {2});
  be().scatter_add(oh, 0, make<int64_t>({0, 0, 1}, {3}), make<Half>({Half(0.5f)}, {3}, {0}));
  EXPECT_EQ(as_float<Half>(oh), (std::vector<float>{2.0f, 0.5f}));
  EXPECT_THROW(
      be().scatter_add(make_bool({0}, {1}), 0, make<int64_t>({0}, {1}), make_bool({1}, {1})),
      DTypeError);
}

}  // namespace
}  // namespace ddp
