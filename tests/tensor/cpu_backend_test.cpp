// Tests of the CPU kernels (memory, copy/cast, fill, elementwise), called
// through cpu_backend() directly on small hand-made tensors (raw storage +
// explicit strides), so they do not depend on the ops frontend. Expected
// values are computed by hand. Reductions, bmm, softmax, random and indexing
// are in cpu_backend_math_test.cpp.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ddp/core/error.h"
#include "tensor/cpu_backend_test_util.h"

namespace ddp {
namespace {

using namespace cpu_test;

// ---------------------------------------------------------------- memory

TEST(CpuBackendMemory, AllocateIsAlignedAndZeroWorks) {
  EXPECT_EQ(be().type(), DeviceType::CPU);
  for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(1000)}) {
    Storage s = be().allocate(n, 0);
    ASSERT_NE(s.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data()) % 64, 0u);
    EXPECT_EQ(s.nbytes(), n);
    EXPECT_TRUE(s.device().is_cpu());
  }
  EXPECT_THROW(be().allocate(SIZE_MAX, 0), OutOfMemoryError);
  be().synchronize(0);  // a no-op, must not throw
}

// ---------------------------------------------------------------- copy

TEST(CpuBackendCopy, StridedAndBroadcastSources) {
  // src is the transpose of a 2x3 matrix: shape [3, 2], strides [1, 3].
  Tensor src = make<float>({1, 2, 3, 4, 5, 6}, {3, 2}, {1, 3});
  Tensor dst = empty(DType::f32, {3, 2});
  be().copy(src, dst);
  EXPECT_EQ(values<float>(dst), (std::vector<float>{1, 4, 2, 5, 3, 6}));

  // A row broadcast down (stride 0) with an offset into its storage.
  Tensor row = make<int32_t>({9, 7, 8, 9}, {2, 3}, {0, 1}, 1);
  Tensor d2 = empty(DType::i32, {2, 3});
  be().copy(row, d2);
  EXPECT_EQ(values<int32_t>(d2), (std::vector<int32_t>{7, 8, 9, 7, 8, 9}));

  // A scalar broadcast everywhere, cast on the way.
  Tensor one = make<double>({2.5}, {2, 2}, {0, 0});
  Tensor d3 = empty(DType::f32, {2, 2});
  be().copy(one, d3);
  EXPECT_EQ(values<float>(d3), (std::vector<float>{2.5f, 2.5f, 2.5f, 2.5f}));
}

TEST(CpuBackendCopy, StridedDestinationAndManyDims) {
  // Write into every other element of an 8-element buffer.
  Tensor dst = make<int64_t>({0, 0, 0, 0, 0, 0, 0, 0}, {4}, {2});
  be().copy(make<int64_t>({1, 2, 3, 4}, {4}), dst);
  std::vector<int64_t> got(8);
  std::memcpy(got.data(), dst.storage().data(), 64);
  EXPECT_EQ(got, (std::vector<int64_t>{1, 0, 2, 0, 3, 0, 4, 0}));

  // 8 dims of size 2, reversed dim order: dst[i0..i7] = src[i7..i0].
  std::vector<int32_t> raw(256);
  for (int i = 0; i < 256; ++i) raw[size_t(i)] = i;
  Shape shape(8, 2), rev(8);
  for (int d = 0; d < 8; ++d) rev[size_t(d)] = int64_t(1) << d;
  Tensor src = make<int32_t>(raw, shape, rev);
  Tensor out = empty(DType::i32, shape);
  be().copy(src, out);
  auto v = values<int32_t>(out);
  for (int i = 0; i < 256; ++i) {
    int reversed = 0;
    for (int b = 0; b < 8; ++b)
      if (i & (1 << b)) reversed |= 1 << (7 - b);
    ASSERT_EQ(v[size_t(i)], reversed) << i;
  }
}

TEST(CpuBackendCopy, TransposedOperandsInTiles) {
  // 45 x 70 (partial 32x32 tiles both ways) read through a transpose, plus a
  // 3-D permutation whose unit-stride dim is not next to the innermost one.
  std::vector<int32_t> raw(45 * 70);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = int32_t(i);
  Tensor t = make<int32_t>(raw, {45, 70}, {1, 45});  // t[i][j] = i + 45 j
  Tensor out = empty(DType::i32, {45, 70});
  be().copy(t, out);
  auto v = values<int32_t>(out);
  for (int i = 0; i < 45; ++i)
    for (int j = 0; j < 70; ++j) ASSERT_EQ(v[size_t(i * 70 + j)], i + 45 * j);

  // p[i][j][k] = k * 1 + i * 5 + j * 35 over shape [7, 9, 5]; dense + p.
  std::vector<int64_t> r3(7 * 9 * 5);
  for (size_t i = 0; i < r3.size(); ++i) r3[i] = int64_t(i);
  Tensor p = make<int64_t>(r3, {7, 9, 5}, {5, 35, 1});
  Tensor dense = make<int64_t>(r3, {7, 9, 5});
  Tensor o = empty(DType::i64, {7, 9, 5});
  be().binary(BinaryOp::add, dense, p, o);
  auto w = values<int64_t>(o);
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 9; ++j)
      for (int k = 0; k < 5; ++k)
        ASSERT_EQ(w[size_t(i * 45 + j * 5 + k)], (i * 45 + j * 5 + k) + (k + i * 5 + j * 35));
  // Transposed destination, strided source in the other direction.
  Tensor dst = make<int32_t>(std::vector<int32_t>(45 * 70), {70, 45}, {1, 70});
  be().copy(make<int32_t>(raw, {70, 45}), dst);  // (j, i) -> i + 45 j
  std::vector<int32_t> back(45 * 70);
  std::memcpy(back.data(), dst.storage().data(), back.size() * 4);
  for (int i = 0; i < 45; ++i)
    for (int j = 0; j < 70; ++j) ASSERT_EQ(back[size_t(i * 70 + j)], i + 45 * j);
}

TEST(CpuBackendCopy, EveryDTypePairOnSmallIntegers) {
  // 0..3 are exact in every dtype except bool, where they become 0,1,1,1.
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      Tensor src = empty(from, {4});
      if (from == DType::bool_) {  // bool has no arange: fill it by hand
        uint8_t raw[4] = {0, 1, 1, 1};
        std::memcpy(src.data_ptr(), raw, 4);
      } else {
        be().arange(src, 0, 1);
      }
      Tensor dst = empty(to, {4});
      be().copy(src, dst);
      Tensor back = empty(DType::f64, {4});
      be().copy(dst, back);
      const bool lossy = from == DType::bool_ || to == DType::bool_;
      std::vector<double> want =
          lossy ? std::vector<double>{0, 1, 1, 1} : std::vector<double>{0, 1, 2, 3};
      EXPECT_EQ(values<double>(back), want) << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

TEST(CpuBackendCopy, HalfRoundsToNearestEven) {
  Tensor src = make<float>(
      {1.0f, 1.00048828125f /* 1+2^-11: tie -> 1 */, 1.00146484375f /* 1+3*2^-11: tie -> 1+2^-9 */,
       65520.0f /* -> inf */, -2.5f, 1e-8f /* below half the smallest subnormal -> 0 */, kNaN,
       6e-8f /* -> smallest subnormal 2^-24 */},
      {8});
  Tensor h = empty(DType::f16, {8});
  be().copy(src, h);
  auto bits = values<uint16_t>(h);
  EXPECT_EQ(bits[0], 0x3C00);
  EXPECT_EQ(bits[1], 0x3C00);
  EXPECT_EQ(bits[2], 0x3C02);
  EXPECT_EQ(bits[3], 0x7C00);
  EXPECT_EQ(bits[4], 0xC100);
  EXPECT_EQ(bits[5], 0x0000);
  EXPECT_EQ(bits[6] & 0x7C00, 0x7C00);
  EXPECT_NE(bits[6] & 0x03FF, 0);
  EXPECT_EQ(bits[7], 0x0001);
}

TEST(CpuBackendCopy, BFloat16RoundsToNearestEven) {
  Tensor src = make<float>({1.0f, 1.00390625f /* 1+2^-8: tie -> 1 */,
                            1.01171875f /* 1+3*2^-8: tie -> 1+2^-6 */, -3.0f, kNaN},
                           {5});
  Tensor b = empty(DType::bf16, {5});
  be().copy(src, b);
  auto bits = values<uint16_t>(b);
  EXPECT_EQ(bits[0], 0x3F80);
  EXPECT_EQ(bits[1], 0x3F80);
  EXPECT_EQ(bits[2], 0x3F82);
  EXPECT_EQ(bits[3], 0xC040);
  EXPECT_EQ(bits[4] & 0x7F80, 0x7F80);  // NaN stays NaN
  EXPECT_NE(bits[4] & 0x007F, 0);

  // bf16 -> f16 goes through float: 1+2^-6 is exact in both.
  Tensor h = empty(DType::f16, {5});
  be().copy(b, h);
  EXPECT_EQ(values<uint16_t>(h)[2], 0x3C10);
}

TEST(CpuBackendCopy, FloatToIntegerAndBool) {
  Tensor src = make<float>({2.7f, -2.7f, kNaN, 1e20f, -0.0f, 0.5f}, {6});
  Tensor i32 = empty(DType::i32, {6});
  be().copy(src, i32);
  auto v = values<int32_t>(i32);
  EXPECT_EQ(v[0], 2);  // truncates toward zero
  EXPECT_EQ(v[1], -2);
  EXPECT_EQ(v[2], 0);  // NaN -> 0 (see Note [Scalar casts])
  EXPECT_EQ(v[4], 0);
  EXPECT_EQ(v[5], 0);
  Tensor i64 = empty(DType::i64, {6});
  be().copy(src, i64);
  EXPECT_EQ(values<int64_t>(i64)[3], INT64_MAX);  // saturates at the int64 range

  Tensor bo = empty(DType::bool_, {6});
  be().copy(src, bo);
  EXPECT_EQ(values<uint8_t>(bo), (std::vector<uint8_t>{1, 1, 1, 1, 0, 1}));  // NaN is true

  // Narrowing integer casts wrap; negative floats to u8 wrap through int64.
  Tensor wide = make<int64_t>({300, -1, (int64_t(1) << 32) + 5}, {3});
  Tensor u8 = empty(DType::u8, {3});
  be().copy(wide, u8);
  EXPECT_EQ(values<uint8_t>(u8), (std::vector<uint8_t>{44, 255, 5}));
  Tensor n32 = empty(DType::i32, {3});
  be().copy(wide, n32);
  EXPECT_EQ(values<int32_t>(n32), (std::vector<int32_t>{300, -1, 5}));
  Tensor fneg = make<float>({-1.0f}, {1});
  Tensor u8b = empty(DType::u8, {1});
  be().copy(fneg, u8b);
  EXPECT_EQ(values<uint8_t>(u8b)[0], 255);

  // bool -> f16 is exactly 1.0; f64 -> f32 rounds to nearest.
  Tensor bsrc = make_bool({1, 0}, {2});
  Tensor hb = empty(DType::f16, {2});
  be().copy(bsrc, hb);
  EXPECT_EQ(values<uint16_t>(hb), (std::vector<uint16_t>{0x3C00, 0x0000}));
  Tensor d = make<double>({1.0 + 1e-9, 0.1}, {2});
  Tensor f = empty(DType::f32, {2});
  be().copy(d, f);
  EXPECT_EQ(values<float>(f), (std::vector<float>{1.0f, 0.1f}));
}

// ---------------------------------------------------------------- fill / arange

TEST(CpuBackendFill, EveryDTypeAndStridedViews) {
  for (DType dt : kAllDTypes) {
    Tensor t = empty(dt, {3});
    be().fill(t, 2.0);
    Tensor back = empty(DType::f64, {3});
    be().copy(t, back);
    const double want = dt == DType::bool_ ? 1.0 : 2.0;
    EXPECT_EQ(values<double>(back), (std::vector<double>{want, want, want})) << dtype_name(dt);
  }
  Tensor h = empty(DType::f16, {1});
  be().fill(h, 0.1);
  EXPECT_EQ(values<uint16_t>(h)[0], 0x2E66);  // 0.1 rounded to half

  // Fill column 1 of a 3x3 matrix only.
  Tensor m = make<float>(std::vector<float>(9, 0.0f), {3}, {3}, 1);
  be().fill(m, -1.0);
  std::vector<float> got(9);
  std::memcpy(got.data(), m.storage().data(), 36);
  EXPECT_EQ(got, (std::vector<float>{0, -1, 0, 0, -1, 0, 0, -1, 0}));
}

TEST(CpuBackendFill, Arange) {
  Tensor f = empty(DType::f32, {4});
  be().arange(f, 1.0, 0.5);
  EXPECT_EQ(values<float>(f), (std::vector<float>{1.0f, 1.5f, 2.0f, 2.5f}));
  Tensor i = empty(DType::i64, {3});
  be().arange(i, 5, -2);
  EXPECT_EQ(values<int64_t>(i), (std::vector<int64_t>{5, 3, 1}));
  Tensor h = empty(DType::bf16, {3});
  be().arange(h, 0, 0.25);
  EXPECT_EQ(as_float<BFloat16>(h), (std::vector<float>{0.0f, 0.25f, 0.5f}));
  // Computed from the index, not by accumulation: 0.1 * 10 in double is 1.
  Tensor d = empty(DType::f64, {11});
  be().arange(d, 0, 0.1);
  EXPECT_EQ(values<double>(d)[10], 10 * 0.1);
  be().arange(empty(DType::f32, {0}), 0, 1);
}

// ---------------------------------------------------------------- elementwise

TEST(CpuBackendElementwise, UnaryIntegerAndFloat) {
  Tensor a = make<int32_t>({-2, 0, 3}, {3});
  Tensor out = empty(DType::i32, {3});
  be().unary(UnaryOp::relu, a, out);
  EXPECT_EQ(values<int32_t>(out), (std::vector<int32_t>{0, 0, 3}));
  be().unary(UnaryOp::abs, a, out);
  EXPECT_EQ(values<int32_t>(out), (std::vector<int32_t>{2, 0, 3}));
  be().unary(UnaryOp::neg, a, out);
  EXPECT_EQ(values<int32_t>(out), (std::vector<int32_t>{2, 0, -3}));

  Tensor u = make<uint8_t>({1, 0}, {2});
  Tensor uo = empty(DType::u8, {2});
  be().unary(UnaryOp::neg, u, uo);  // wraps like torch
  EXPECT_EQ(values<uint8_t>(uo), (std::vector<uint8_t>{255, 0}));

  Tensor d = make<double>({4.0, 9.0, 0.25}, {3});
  Tensor dout = empty(DType::f64, {3});
  be().unary(UnaryOp::sqrt, d, dout);
  EXPECT_EQ(values<double>(dout), (std::vector<double>{2.0, 3.0, 0.5}));
  be().unary(UnaryOp::rsqrt, d, dout);
  EXPECT_EQ(values<double>(dout), (std::vector<double>{0.5, 1.0 / 3.0, 2.0}));

  Tensor x = make<float>({0.0f, 1.0f, -1.0f}, {3});
  Tensor y = empty(DType::f32, {3});
  be().unary(UnaryOp::exp, x, y);
  EXPECT_EQ(values<float>(y)[0], 1.0f);
  EXPECT_NEAR(values<float>(y)[1], 2.7182818f, 1e-6);
  be().unary(UnaryOp::sigmoid, x, y);
  EXPECT_EQ(values<float>(y)[0], 0.5f);
  EXPECT_NEAR(values<float>(y)[1] + values<float>(y)[2], 1.0f, 1e-6);
  be().unary(UnaryOp::gelu, x, y);
  EXPECT_EQ(values<float>(y)[0], 0.0f);
  EXPECT_NEAR(values<float>(y)[1], 0.8411920f, 1e-6);  // tanh-approximated GELU(1)
  EXPECT_NEAR(values<float>(y)[2], -0.1588080f, 1e-6);
  be().unary(UnaryOp::log, make<float>({1.0f, 0.0f, -1.0f}, {3}), y);
  EXPECT_EQ(values<float>(y)[0], 0.0f);
  EXPECT_EQ(values<float>(y)[1], -kInf);
  EXPECT_TRUE(std::isnan(values<float>(y)[2]));
}

TEST(CpuBackendElementwise, UnaryHalfStridedAndZeroDim) {
  // relu over the transpose of [[-1, 2], [3, -4]] in f16.
  Tensor h = make<Half>({Half(-1.0f), Half(2.0f), Half(3.0f), Half(-4.0f)}, {2, 2}, {1, 2});
  Tensor out = empty(DType::f16, {2, 2});
  be().unary(UnaryOp::relu, h, out);
  EXPECT_EQ(as_float<Half>(out), (std::vector<float>{0, 3, 2, 0}));
  be().unary(UnaryOp::tanh, h, out);
  EXPECT_EQ(as_float<Half>(out)[0], float(Half(std::tanh(-1.0f))));  // rounded once

  Tensor s = make<float>({-3.0f}, {});
  Tensor so = empty(DType::f32, {});
  be().unary(UnaryOp::abs, s, so);
  EXPECT_EQ(values<float>(so)[0], 3.0f);
}

TEST(CpuBackendElementwise, UnaryDTypeErrorsNameTheOp) {
  Tensor i = make<int32_t>({1}, {1});
  try {
    be().unary(UnaryOp::gelu, i, empty(DType::i32, {1}));
    FAIL() << "expected DTypeError";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("gelu"), std::string::npos) << e.what();
  }
  EXPECT_THROW(be().unary(UnaryOp::relu, make_bool({1}, {1}), empty(DType::bool_, {1})),
               DTypeError);
}

TEST(CpuBackendElementwise, UnaryBackward) {
  Tensor x = make<float>({-1.0f, 2.0f, 0.0f}, {3});
  Tensor dy = make<float>({5.0f, 7.0f, 9.0f}, {3});
  Tensor dx = empty(DType::f32, {3});
  be().unary_backward(UnaryOp::relu, x, Tensor(), dy, dx);  // relu needs only x
  EXPECT_EQ(values<float>(dx), (std::vector<float>{0.0f, 7.0f, 0.0f}));

  Tensor y = make<float>({0.5f, 2.0f, 3.0f}, {3});
  be().unary_backward(UnaryOp::exp, Tensor(), y, dy, dx);  // exp needs only y
  EXPECT_EQ(values<float>(dx), (std::vector<float>{2.5f, 14.0f, 27.0f}));
  be().unary_backward(UnaryOp::tanh, x, y, dy, dx);  // dy * (1 - y^2)
  EXPECT_EQ(values<float>(dx), (std::vector<float>{3.75f, -21.0f, -72.0f}));
  be().unary_backward(UnaryOp::abs, x, y, dy, dx);
  EXPECT_EQ(values<float>(dx), (std::vector<float>{-5.0f, 7.0f, 0.0f}));

  // Broadcast dy (stride 0), bf16.
  Tensor xb = make<BFloat16>({BFloat16(1.0f), BFloat16(-1.0f)}, {2});
  Tensor yb = make<BFloat16>({BFloat16(4.0f), BFloat16(0.25f)}, {2});
  Tensor dyb = make<BFloat16>({BFloat16(2.0f)}, {2}, {0});
  Tensor dxb = empty(DType::bf16, {2});
  be().unary_backward(UnaryOp::sqrt, xb, yb, dyb, dxb);  // dy / (2 y)
  EXPECT_EQ(as_float<BFloat16>(dxb), (std::vector<float>{0.25f, 4.0f}));
  EXPECT_THROW(be().unary_backward(UnaryOp::relu, make<int64_t>({1}, {1}), Tensor(),
                                   make<int64_t>({1}, {1}), empty(DType::i64, {1})),
               DTypeError);
}

TEST(CpuBackendElementwise, BinaryBroadcastAndScalar) {
  Tensor a = make<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = make<float>({10, 20, 30}, {2, 3}, {0, 1});
  Tensor out = empty(DType::f32, {2, 3});
  be().binary(BinaryOp::add, a, row, out);
  EXPECT_EQ(values<float>(out), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  Tensor col = make<float>({2, 4}, {2, 3}, {1, 0});
  be().binary(BinaryOp::mul, a, col, out);
  EXPECT_EQ(values<float>(out), (std::vector<float>{2, 4, 6, 16, 20, 24}));
  Tensor half = make<float>({0.5f}, {2, 3}, {0, 0});
  be().binary(BinaryOp::mul, a, half, out);  // right scalar fast path
  EXPECT_EQ(values<float>(out), (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3}));
  be().binary(BinaryOp::sub, half, a, out);  // left scalar fast path
  EXPECT_EQ(values<float>(out), (std::vector<float>{-0.5f, -1.5f, -2.5f, -3.5f, -4.5f, -5.5f}));

  // Non-contiguous everything: a transposed 3-D view against a permuted one.
  std::vector<int64_t> raw(24);
  for (int i = 0; i < 24; ++i) raw[size_t(i)] = i;
  Tensor p = make<int64_t>(raw, {4, 3, 2}, {1, 8, 4});  // element (i,j,k) = i + 8j + 4k
  Tensor q = make<int64_t>(raw, {4, 3, 2}, {6, 2, 1});  // dense: 6i + 2j + k
  Tensor o = empty(DType::i64, {4, 3, 2});
  be().binary(BinaryOp::sub, q, p, o);
  auto v = values<int64_t>(o);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k)
        EXPECT_EQ(v[size_t(6 * i + 2 * j + k)], (6 * i + 2 * j + k) - (i + 8 * j + 4 * k));
}

TEST(CpuBackendElementwise, BinaryIntegerSemantics) {
  Tensor a = make<int32_t>({7, -7, 5, 0}, {4});
  Tensor b = make<int32_t>({2, 2, 0, 0}, {4});
  Tensor out = empty(DType::i32, {4});
  be().binary(BinaryOp::div, a, b, out);  // truncation; x / 0 == 0
  EXPECT_EQ(values<int32_t>(out), (std::vector<int32_t>{3, -3, 0, 0}));
  Tensor u1 = make<uint8_t>({1, 200}, {2});
  Tensor u2 = make<uint8_t>({2, 100}, {2});
  Tensor uo = empty(DType::u8, {2});
  be().binary(BinaryOp::sub, u1, u2, uo);
  EXPECT_EQ(values<uint8_t>(uo), (std::vector<uint8_t>{255, 100}));
  be().binary(BinaryOp::add, u1, u2, uo);
  EXPECT_EQ(values<uint8_t>(uo), (std::vector<uint8_t>{3, 44}));

  Tensor f = make<float>({1.0f, -1.0f, 0.0f}, {3});
  Tensor z = make<float>({0.0f}, {3}, {0});
  Tensor fo = empty(DType::f32, {3});
  be().binary(BinaryOp::div, f, z, fo);
  EXPECT_EQ(values<float>(fo)[0], kInf);
  EXPECT_EQ(values<float>(fo)[1], -kInf);
  EXPECT_TRUE(std::isnan(values<float>(fo)[2]));

  try {
    be().binary(BinaryOp::add, make_bool({1}, {1}), make_bool({1}, {1}), empty(DType::bool_, {1}));
    FAIL() << "expected DTypeError";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("add"), std::string::npos) << e.what();
  }
}

TEST(CpuBackendElementwise, MaximumMinimumPropagateNaN) {
  Tensor a = make<float>({1, kNaN, 3, 2}, {4});
  Tensor b = make<float>({2, 0, kNaN, 2}, {4});
  Tensor o = empty(DType::f32, {4});
  be().binary(BinaryOp::maximum, a, b, o);
  auto v = values<float>(o);
  EXPECT_EQ(v[0], 2.0f);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(v[3], 2.0f);
  be().binary(BinaryOp::minimum, a, b, o);
  v = values<float>(o);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_TRUE(std::isnan(v[2]));

  Tensor h1 = make<Half>({Half(1.0f)}, {1});
  Tensor h2 = make<Half>({Half(0.00048828125f)}, {1});  // 2^-11
  Tensor ho = empty(DType::f16, {1});
  be().binary(BinaryOp::add, h1, h2, ho);  // 1 + 2^-11 is a tie in f16 -> 1
  EXPECT_EQ(values<uint16_t>(ho)[0], 0x3C00);
}

TEST(CpuBackendElementwise, CompareAndWhere) {
  Tensor a = make<float>({1, 2, kNaN, 4}, {4});
  Tensor b = make<float>({2}, {4}, {0});
  Tensor o = empty(DType::bool_, {4});
  be().compare(CompareOp::lt, a, b, o);
  EXPECT_EQ(values<uint8_t>(o), (std::vector<uint8_t>{1, 0, 0, 0}));
  be().compare(CompareOp::eq, a, a, o);
  EXPECT_EQ(values<uint8_t>(o), (std::vector<uint8_t>{1, 1, 0, 1}));  // NaN != NaN
  be().compare(CompareOp::ne, a, a, o);
  EXPECT_EQ(values<uint8_t>(o), (std::vector<uint8_t>{0, 0, 1, 0}));
  be().compare(CompareOp::ge, a, b, o);
  EXPECT_EQ(values<uint8_t>(o), (std::vector<uint8_t>{0, 1, 0, 1}));

  Tensor i = make<int64_t>({-1, 5}, {2});
  Tensor j = make<int64_t>({-1, 4}, {2});
  Tensor io = empty(DType::bool_, {2});
  be().compare(CompareOp::le, i, j, io);
  EXPECT_EQ(values<uint8_t>(io), (std::vector<uint8_t>{1, 0}));
  be().compare(CompareOp::gt, make_bool({1, 0}, {2}), make_bool({0, 0}, {2}), io);
  EXPECT_EQ(values<uint8_t>(io), (std::vector<uint8_t>{1, 0}));

  // where with a strided condition (every other byte) and a broadcast b.
  Tensor cond = make_bool({1, 9, 0, 9, 1, 9}, {3}, {2});
  Tensor x = make<int32_t>({10, 20, 30}, {3});
  Tensor y = make<int32_t>({-1}, {3}, {0});
  Tensor w = empty(DType::i32, {3});
  be().where(cond, x, y, w);
  EXPECT_EQ(values<int32_t>(w), (std::vector<int32_t>{10, -1, 30}));
  Tensor hb = empty(DType::bf16, {3});
  be().where(cond, make<BFloat16>({BFloat16(1.5f)}, {3}, {0}),
             make<BFloat16>({BFloat16(-2.0f)}, {3}, {0}), hb);
  EXPECT_EQ(as_float<BFloat16>(hb), (std::vector<float>{1.5f, -2.0f, 1.5f}));
}

TEST(CpuBackendElementwise, NumelZeroDoesNothing) {
  Tensor a = make<float>({}, {0, 3});
  Tensor o = make<float>({}, {0, 3});
  be().unary(UnaryOp::exp, a, o);
  be().binary(BinaryOp::add, a, a, o);
  be().compare(CompareOp::eq, a, a, make_bool({}, {0, 3}));
  be().copy(a, make<int32_t>({}, {0, 3}));
  be().fill(o, 1.0);
  be().gather(make<float>({1.0f}, {1, 1}), 1, make<int64_t>({}, {0, 1}), make<float>({}, {0, 1}));
  be().random(make<float>({}, {0}), Backend::Distribution::normal, 0, 1, 1, 0);
  be().bmm(make<float>({}, {2, 0, 3}), make<float>(std::vector<float>(6), {2, 3, 1}),
           make<float>({}, {2, 0, 1}));
  SUCCEED();
}

}  // namespace
}  // namespace ddp
