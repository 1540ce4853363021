// The index paths of the CUDA elementwise kernels (Note [CUDA elementwise
// paths]) and the reduction kernels (Notes [CUDA two-pass reductions] and
// [CUDA column reductions]), each against the CPU backend on the same
// inputs. Results that IEEE arithmetic fixes (add, casts, integer sums,
// max/min and their indices) must match bit for bit; float sums within a
// tolerance, and bitwise from run to run. Every test needs a GPU and skips
// without one; the op-level comparison of the same paths is the
// cuda_samples of op_infos_cuda_paths.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ddp/core/error.h"
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

TensorOptions on(DType dt, Device dev = Device::cpu()) { return TensorOptions(dt).device(dev); }

// Random values in [lo, hi), rounded for integer dtypes, as a CPU tensor.
Tensor random_cpu(const Shape& shape, DType dt, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  if (dt == DType::u8 || dt == DType::bool_) lo = std::max(lo, 0.0);  // no negative u8
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) x = is_floating(dt) ? u(rng) : std::floor(u(rng));
  return Tensor::from_vector(v, shape, on(dt));
}

// The bytes of two tensors of one shape, compared in logical order.
void expect_same_bits(const Tensor& cuda_result, const Tensor& cpu_result, const std::string& what) {
  const Tensor h = cuda_result.cpu().contiguous();
  const Tensor c = cpu_result.contiguous();
  ASSERT_EQ(h.shape(), c.shape()) << what;
  ASSERT_EQ(h.dtype(), c.dtype()) << what;
  EXPECT_EQ(std::memcmp(h.data_ptr(), c.data_ptr(), h.nbytes()), 0) << what;
}

// Long float sums: |cuda - cpu| <= rtol * max(1, max |cpu|), as a sum that
// cancels to near zero keeps the absolute rounding error of its terms.
void expect_close(const Tensor& cuda_result, const Tensor& cpu_result, double rtol,
                  const std::string& what) {
  const std::vector<double> g = cuda_result.cpu().contiguous().to_vector<double>();
  const std::vector<double> c = cpu_result.contiguous().to_vector<double>();
  ASSERT_EQ(g.size(), c.size()) << what;
  double scale = 1.0;
  for (double x : c)
    if (!std::isnan(x)) scale = std::max(scale, std::abs(x));
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    if (std::isnan(g[i]) && std::isnan(c[i])) continue;
    if (std::abs(g[i] - c[i]) <= rtol * scale) continue;
    ADD_FAILURE() << what << ": element " << i << " cpu " << c[i] << " cuda " << g[i];
    ++bad;
  }
}

// ---- elementwise

// `view` makes each operand from a contiguous base; both devices get the
// same values in the same layout. The output is `view` of a fresh base too
// (out_like_inputs: all operands share one layout) or contiguous. add is
// exact in every dtype's compute type, so the GPU must match the CPU bit for
// bit.
void check_add(const std::string& what, const Shape& base_shape,
               const std::function<Tensor(const Tensor&)>& view, bool out_like_inputs = true) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u8, DType::f64}) {
    const Tensor a_base = random_cpu(base_shape, dt, -50, 50, 1);
    const Tensor b_base = random_cpu(base_shape, dt, -50, 50, 2);
    const Tensor ac = view(a_base), bc = view(b_base);
    const Tensor ag = view(a_base.to(kGpu)), bg = view(b_base.to(kGpu));
    const Tensor oc = out_like_inputs ? view(Tensor::empty(base_shape, on(dt)))
                                      : Tensor::empty(ac.shape(), on(dt));
    const Tensor og = out_like_inputs ? view(Tensor::empty(base_shape, on(dt, kGpu)))
                                      : Tensor::empty(ac.shape(), on(dt, kGpu));
    cpu().binary(BinaryOp::add, ac, bc, oc);
    gpu().binary(BinaryOp::add, ag, bg, og);
    expect_same_bits(og, oc, what + " " + dtype_name(dt));
  }
}

TEST(CudaKernelPaths, FlatVectorisedWithATail) {
  REQUIRE_GPU();
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(4099), (int64_t(1) << 20) + 5})
    check_add("flat n=" + std::to_string(n), {n}, [](const Tensor& t) { return t; });
}

TEST(CudaKernelPaths, UnalignedViewsRunElementByElement) {
  REQUIRE_GPU();
  const int64_t n = (int64_t(1) << 20) + 1;
  for (int64_t offset : {1, 2, 3})
    check_add("offset " + std::to_string(offset), {n + offset},
              [=](const Tensor& t) { return t.narrow(0, offset, n); });
}

TEST(CudaKernelPaths, ChannelsLastIsFlat) {
  REQUIRE_GPU();
  check_add("nhwc", {4, 17, 19, 64}, [](const Tensor& t) { return t.permute({0, 3, 1, 2}); });
}

TEST(CudaKernelPaths, StridedViewsUseTheFastDivision) {
  REQUIRE_GPU();
  // Inputs transposed or sliced, the output contiguous: the strided path.
  check_add("transposed", {513, 1031}, [](const Tensor& t) { return t.transpose(0, 1); }, false);
  check_add("sliced 3-d", {7, 300, 301},
            [](const Tensor& t) { return t.narrow(1, 3, 290).narrow(2, 1, 299).permute({2, 0, 1}); },
            false);
  // All sliced alike: not dense, so strided too, writing through the view.
  check_add("sliced alike", {7, 300, 301},
            [](const Tensor& t) { return t.narrow(1, 3, 290).narrow(2, 1, 299); });
}

TEST(CudaKernelPaths, BroadcastOperandsMatchTheCpu) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f16, DType::i64}) {
    const Tensor a = random_cpu({333, 1, 517}, dt, -9, 9, 3);
    const Tensor b = random_cpu({7, 517}, dt, -9, 9, 4);
    const Shape out_shape = {333, 7, 517};
    const Tensor oc = Tensor::empty(out_shape, on(dt)), og = Tensor::empty(out_shape, on(dt, kGpu));
    cpu().binary(BinaryOp::mul, a.expand(out_shape), b.expand(out_shape), oc);
    gpu().binary(BinaryOp::mul, a.to(kGpu).expand(out_shape), b.to(kGpu).expand(out_shape), og);
    expect_same_bits(og, oc, std::string("broadcast ") + dtype_name(dt));
  }
}

// Offsets past 2^31 take the 64-bit path: a [2, 2^31 + 64] u8 tensor (4 GiB)
// whose second row's tail is viewed, written and read through strides.
TEST(CudaKernelPaths, OffsetsPast32BitsUse64BitIndexing) {
  REQUIRE_GPU();
  const int64_t width = (int64_t(1) << 31) + 64;
  Tensor big;
  try {
    big = Tensor::empty({2, width}, on(DType::u8, kGpu));
  } catch (const OutOfMemoryError& e) {
    GTEST_SKIP() << "needs 4 GiB of GPU memory: " << e.what();
  }
  gpu().fill(big, 3.0);
  const Tensor region = big.narrow(1, width - 64, 64);  // offsets up to 2 * width
  const Tensor values = random_cpu({2, 64}, DType::u8, 0, 100, 5);
  gpu().copy(values.to(kGpu), region);  // strided write, 64-bit
  const Tensor back = Tensor::empty({2, 64}, on(DType::u8, kGpu));
  gpu().copy(region, back);  // strided read, 64-bit
  expect_same_bits(back, values, "64-bit copy round trip");
  const Tensor sum_g = Tensor::empty({2, 64}, on(DType::u8, kGpu));
  gpu().binary(BinaryOp::add, region, region, sum_g);
  const Tensor sum_c = Tensor::empty({2, 64}, on(DType::u8));
  cpu().binary(BinaryOp::add, values, values, sum_c);
  expect_same_bits(sum_g, sum_c, "64-bit add");
  // The rest of the row is untouched.
  const Tensor before = Tensor::empty({2, 64}, on(DType::u8, kGpu));
  gpu().copy(big.narrow(1, width - 128, 64), before);
  expect_same_bits(before, Tensor::full({2, 64}, 3.0, on(DType::u8)), "neighbours untouched");
}

// Note [Hardware half conversions]: the device casts of special values
// (subnormals, ties, overflow, infinities, NaN payloads, -0) give exactly the
// CPU's bits, on the vectorised path and on a strided one.
TEST(CudaKernelPaths, HalfConversionsMatchTheCpuBitForBit) {
  REQUIRE_GPU();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, 65519.0f, 1e9f, -1e9f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), 5.96e-8f, 2.98e-8f, 2.99e-8f,
                          6.1e-5f, 1.0009765625f, 1.00048828125f, 1.00146484375f, 3.0e-39f,
                          1.0f + 1.0f / 256, 1.0f + 3.0f / 256};
  uint32_t nan_bits[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa5a5a5u, 0xff812345u};
  for (uint32_t bits : nan_bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  std::mt19937 rng(6);
  std::uniform_int_distribution<uint32_t> any;
  while (v.size() < 100003) {  // random bit patterns: every exponent, both signs
    uint32_t bits = any(rng);
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  const int64_t n = int64_t(v.size());
  const Tensor src_c = Tensor::from_vector(v, {n}, on(DType::f32));
  const Tensor src_g = src_c.to(kGpu);
  for (DType half : {DType::f16, DType::bf16}) {
    const Tensor hc = Tensor::empty({n}, on(half)), hg = Tensor::empty({n}, on(half, kGpu));
    cpu().copy(src_c, hc);
    gpu().copy(src_g, hg);
    expect_same_bits(hg, hc, std::string("f32 -> ") + dtype_name(half));
    // Back to f32 and to f64 (half -> float in hardware), then f64 -> half.
    for (DType wide : {DType::f32, DType::f64}) {
      const Tensor wc = Tensor::empty({n}, on(wide)), wg = Tensor::empty({n}, on(wide, kGpu));
      cpu().copy(hc, wc);
      gpu().copy(hg, wg);
      expect_same_bits(wg, wc, std::string(dtype_name(half)) + " -> " + dtype_name(wide));
    }
    // A strided cast: every other element, reversed layout via a transpose.
    const Tensor m_c = src_c.narrow(0, 0, 100000).view({400, 250}).transpose(0, 1);
    const Tensor m_g = src_g.narrow(0, 0, 100000).view({400, 250}).transpose(0, 1);
    const Tensor sc = Tensor::empty({250, 400}, on(half));
    const Tensor sg = Tensor::empty({250, 400}, on(half, kGpu));
    cpu().copy(m_c, sc);
    gpu().copy(m_g, sg);
    expect_same_bits(sg, sc, std::string("strided f32 -> ") + dtype_name(half));
  }
}

// ---- reductions

// out dtype of op over dt (Backend::reduce_rows).
DType out_dtype(ReductionOp op, DType dt) {
  if (op == ReductionOp::argmax || op == ReductionOp::argmin) return DType::i64;
  if (op == ReductionOp::sum && !is_floating(dt)) return DType::i64;
  return dt;
}

const ReductionOp kOps[] = {ReductionOp::sum, ReductionOp::max, ReductionOp::min, ReductionOp::argmax,
                         ReductionOp::argmin};

// Both reductions of in ([rows, cols]) on both backends; columns: reduce_cols.
void check_reduce(const Tensor& in, bool columns, const std::string& what) {
  const int64_t n = columns ? in.shape()[1] : in.shape()[0];
  const Tensor in_g = in.to(kGpu);
  for (ReductionOp op : kOps) {
    const std::string label = what + " op " + std::to_string(int(op)) + " " + dtype_name(in.dtype());
    const DType odt = out_dtype(op, in.dtype());
    const Tensor oc = Tensor::empty({n}, on(odt));
    const Tensor og = Tensor::empty({n}, on(odt, kGpu));
    const Tensor og2 = Tensor::empty({n}, on(odt, kGpu));
    if (columns) {
      cpu().reduce_cols(op, in, oc);
      gpu().reduce_cols(op, in_g, og);
      gpu().reduce_cols(op, in_g, og2);
    } else {
      cpu().reduce_rows(op, in, oc);
      gpu().reduce_rows(op, in_g, og);
      gpu().reduce_rows(op, in_g, og2);
    }
    expect_same_bits(og2, og.cpu(), label + " (run to run)");
    if (op == ReductionOp::sum && is_floating(in.dtype()))
      expect_close(og, oc, in.dtype() == DType::f32 ? 1e-5 : 1e-2, label);
    else
      expect_same_bits(og, oc, label);
  }
}

TEST(CudaKernelPaths, LongRowsReduceInTwoPasses) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u8}) {
    check_reduce(random_cpu({1, (int64_t(1) << 22) + 17}, dt, -4, 4, 7), false, "one long row");
    check_reduce(random_cpu({3, 1000003}, dt, -4, 4, 8), false, "three long rows");
    check_reduce(random_cpu({3000, 37}, dt, -4, 4, 9), false, "many short rows");
  }
}

TEST(CudaKernelPaths, ColumnReductionsMatchTheCpu) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i64, DType::u8}) {
    check_reduce(random_cpu({100, 1000}, dt, -4, 4, 10), true, "one pass");
    check_reduce(random_cpu({300007, 7}, dt, -4, 4, 11), true, "narrow, two passes");
    check_reduce(random_cpu({5000, 2112}, dt, -4, 4, 12), true, "wide, two passes");
    check_reduce(random_cpu({1, 77}, dt, -4, 4, 13), true, "one row");
  }
}

TEST(CudaKernelPaths, ColumnExtremesPropagateNanAndKeepTheFirstIndex) {
  REQUIRE_GPU();
  std::vector<float> v(size_t(4000) * 3, 1.0f);
  v[size_t(1500) * 3 + 1] = std::nanf("");
  v[size_t(3900) * 3 + 1] = std::nanf("");  // a later NaN loses to the first
  v[size_t(2500) * 3 + 2] = 5.0f;
  v[size_t(2600) * 3 + 2] = 5.0f;  // a tie keeps the lower row
  const Tensor in = Tensor::from_vector(v, {4000, 3}, on(DType::f32));
  check_reduce(in, true, "nan and ties");
  const Tensor idx = Tensor::empty({3}, on(DType::i64, kGpu));
  gpu().reduce_cols(ReductionOp::argmax, in.to(kGpu), idx);
  EXPECT_EQ(idx.cpu().to_vector<int64_t>(), (std::vector<int64_t>{0, 1500, 2500}));
}

TEST(CudaKernelPaths, EmptyReductions) {
  REQUIRE_GPU();
  const Tensor out = Tensor::full({5}, 9.0, on(DType::f32, kGpu));
  gpu().reduce_cols(ReductionOp::sum, Tensor::empty({0, 5}, on(DType::f32, kGpu)), out);
  EXPECT_EQ(out.cpu().to_vector<float>(), std::vector<float>(5, 0.0f));
  const Tensor none = Tensor::empty({0}, on(DType::f32, kGpu));
  gpu().reduce_cols(ReductionOp::max, Tensor::empty({3, 0}, on(DType::f32, kGpu)), none);
  gpu().reduce_rows(ReductionOp::max, Tensor::empty({0, 3}, on(DType::f32, kGpu)), none);
  gpu().synchronize(0);
}

}  // namespace
}  // namespace ddp
