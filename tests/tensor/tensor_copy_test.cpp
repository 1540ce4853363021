// Tests of the Tensor class on the CPU, continued from tensor_test.cpp:
// copies and conversions and in-place arithmetic, with their error paths
// (Note [Error messages]). Helpers: tensor_test_util.h.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <regex>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/dispatch.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/tensor.h"

#include "tensor/tensor_test_util.h"

namespace ddp {
namespace {

using namespace tensor_test;

TEST(TensorCopy, CloneIsIndependentAndKeepsADenseLayout) {
  Tensor x = arange_tensor({3, 4});
  Tensor c = x.clone();
  EXPECT_FALSE(c.storage().is_same(x.storage()));
  EXPECT_EQ(c.dtype(), x.dtype());
  EXPECT_THAT(values(c), ElementsAreArray(values(x)));
  c.fill_(0);
  EXPECT_EQ(values(x)[5], 5.0);
  // A dense view keeps its memory order (Note [Memory-format propagation]),
  // as torch's clone does; contiguous() makes the row-major copy.
  Tensor ct = x.t().clone();
  EXPECT_EQ(ct.strides(), x.t().strides());
  EXPECT_FALSE(ct.storage().is_same(x.storage()));
  EXPECT_THAT(values(ct), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
  Tensor cc = x.t().contiguous();
  EXPECT_TRUE(cc.is_contiguous());
  EXPECT_THAT(raw_values(cc), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
  // A view with gaps gives a contiguous clone.
  Tensor cs = x.slice(1, 0, 4, 2).clone();
  EXPECT_TRUE(cs.is_contiguous());
  EXPECT_THAT(raw_values(cs), ElementsAre(0, 2, 4, 6, 8, 10));
  for (DType dt : kAllDTypes) EXPECT_EQ(Tensor::ones({2}, dt).clone().dtype(), dt);
}

TEST(TensorCopy, CopyBroadcastsAndCasts) {
  Tensor dst = Tensor::zeros({2, 3});
  dst.copy_(Tensor::from_vector<float>({1, 2, 3}, {3}));
  EXPECT_THAT(raw_values(dst), ElementsAre(1, 2, 3, 1, 2, 3));
  dst.copy_(Tensor::from_vector<float>({7, 8}, {2, 1}));
  EXPECT_THAT(raw_values(dst), ElementsAre(7, 7, 7, 8, 8, 8));
  dst.copy_(Tensor::scalar(-1.5));
  EXPECT_THAT(raw_values(dst), ElementsAre(-1.5, -1.5, -1.5, -1.5, -1.5, -1.5));
  // Dtype casts on the way.
  dst.copy_(Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3}, DType::i32));
  EXPECT_THAT(raw_values(dst), ElementsAre(1, 2, 3, 4, 5, 6));
  Tensor idst = Tensor::zeros({3}, DType::i64);
  idst.copy_(Tensor::from_vector<double>({1.7, -1.7, 100.2}, {3}, DType::f64));
  EXPECT_THAT(raw_values(idst), ElementsAre(1, -1, 100));
  Tensor hdst = Tensor::zeros({1}, DType::f16);
  hdst.copy_(Tensor::from_vector<float>({0.1f}, {1}));
  EXPECT_EQ(hdst.data<Half>()[0].bits, 0x2E66);  // torch: tensor([0.1]).half() is 0x2E66
  // copy_ returns *this.
  Tensor& ref = dst.copy_(Tensor::scalar(0));
  EXPECT_TRUE(ref.is_same(dst));
}

TEST(TensorCopy, CopyIntoNonContiguousViews) {
  Tensor base = Tensor::zeros({3, 4});
  base.t().copy_(arange_tensor({4, 3}));
  // base.t()[i][j] = 3i + j, so base[j][i] = 3i + j.
  EXPECT_THAT(raw_values(base), ElementsAre(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11));
  Tensor b2 = Tensor::zeros({3, 4});
  b2.narrow(1, 1, 2).copy_(Tensor::from_vector<float>({5, 6}, {2}));
  EXPECT_THAT(raw_values(b2), ElementsAre(0, 5, 6, 0, 0, 5, 6, 0, 0, 5, 6, 0));
  Tensor b3 = Tensor::zeros({6});
  b3.slice(0, 1, 6, 2).copy_(Tensor::ones({3}, DType::u8));
  EXPECT_THAT(raw_values(b3), ElementsAre(0, 1, 0, 1, 0, 1));
  // Source non-contiguous too.
  Tensor b4 = Tensor::zeros({4, 3}, DType::f64);
  b4.copy_(arange_tensor({3, 4}).t());
  EXPECT_THAT(raw_values(b4), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
}

TEST(TensorCopy, CopyErrorsNameCopy) {
  Tensor dst = Tensor::zeros({2, 3});
  EXPECT_DDP_ERROR(dst.copy_(Tensor::zeros({2})), ShapeError, "copy_");
  EXPECT_DDP_ERROR(dst.copy_(Tensor::zeros({3, 3})), ShapeError, "copy_");
  EXPECT_DDP_ERROR(dst.copy_(Tensor::zeros({2, 2, 3})), ShapeError, "copy_");
  // Writing into an expanded (overlapping) view would be ambiguous.
  Tensor e = Tensor::zeros({3, 1}).expand({3, 4});
  EXPECT_DDP_ERROR(e.copy_(Tensor::ones({3, 4})), ValueError, "copy_");
}

TEST(TensorCopy, ToDTypeForEveryPair) {
  const std::vector<double> src_values = {0, 1, 3, 100};
  for (DType from : kAllDTypes) {
    Tensor src = Tensor::from_vector<double>(src_values, {4}, from);
    std::vector<double> have = raw_values(src);
    for (DType to : kAllDTypes) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      Tensor out = src.to(to);
      EXPECT_EQ(out.dtype(), to);
      EXPECT_EQ(out.shape(), Shape({4}));
      std::vector<double> expected = have;
      if (to == DType::bool_)
        for (double& v : expected) v = v != 0 ? 1 : 0;
      EXPECT_THAT(raw_values(out), ElementsAreArray(expected));
      if (from != to) EXPECT_FALSE(out.storage().is_same(src.storage()));
    }
  }
}

TEST(TensorCopy, ToDTypeRoundingAndTruncation) {
  // torch: tensor([2.7, -2.7]).to(torch.int32) == [2, -2];
  //        tensor([300], dtype=torch.int32).to(torch.uint8) == [44]
  Tensor f = Tensor::from_vector<float>({2.7f, -2.7f, 0.5f}, {3});
  EXPECT_THAT(raw_values(f.to(DType::i32)), ElementsAre(2, -2, 0));
  EXPECT_THAT(raw_values(f.to(DType::i64)), ElementsAre(2, -2, 0));
  EXPECT_THAT(raw_values(f.to(DType::bool_)), ElementsAre(1, 1, 1));
  EXPECT_THAT(raw_values(Tensor::from_vector<int32_t>({300}, {1}, DType::i32).to(DType::u8)),
              ElementsAre(44));
  Tensor tenth = Tensor::from_vector<float>({0.1f}, {1});
  EXPECT_EQ(tenth.to(DType::f16).data<Half>()[0].bits, 0x2E66);       // torch
  EXPECT_EQ(tenth.to(DType::bf16).data<BFloat16>()[0].bits, 0x3DCD);  // torch
  EXPECT_EQ(Tensor::from_vector<float>({65520.0f}, {1}).to(DType::f16).data<Half>()[0].bits,
            0x7C00);  // overflow to inf
  Tensor d = Tensor::from_vector<double>({1.0 + 1e-12}, {1}, DType::f64);
  EXPECT_EQ(d.to(DType::f32).data<float>()[0], 1.0f);
  Tensor nan = Tensor::from_vector<float>({std::nanf("")}, {1});
  EXPECT_TRUE(std::isnan(float(nan.to(DType::f16).data<Half>()[0])));
  EXPECT_TRUE(std::isnan(nan.to(DType::f64).data<double>()[0]));
}

TEST(TensorCopy, ToNonContiguousSourceGivesRowMajorResult) {
  Tensor x = arange_tensor({3, 4});
  Tensor y = x.t().to(DType::f64);
  EXPECT_EQ(y.shape(), Shape({4, 3}));
  EXPECT_THAT(values(y), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
}

TEST(TensorCopy, ToTheSameDeviceAndDTypeIsANoOp) {
  Tensor x = arange_tensor({3, 4});
  EXPECT_TRUE(x.to(Device::cpu()).is_same(x));
  EXPECT_TRUE(x.cpu().is_same(x));
  EXPECT_TRUE(x.to(DType::f32).is_same(x));
  EXPECT_TRUE(x.to(Device::cpu(), DType::f32).is_same(x));
  Tensor d = x.to(Device::cpu(), DType::f64);
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_EQ(d.device(), Device::cpu());
  EXPECT_THAT(raw_values(d), ElementsAreArray(iota_values(12)));
}

TEST(TensorCopy, ToCudaWithoutAGpuRaisesDeviceError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is available; tests/*_gpu_test.cpp cover it";
  EXPECT_FALSE(cuda::is_available());
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_FALSE(cuda::unavailable_reason().empty());
  Tensor x = arange_tensor({2, 2});
  EXPECT_DDP_ERROR(x.to(Device::cuda(0)), DeviceError, "cuda");
  EXPECT_DDP_ERROR(x.cuda(), DeviceError, "cuda");
  EXPECT_DDP_ERROR(x.to(Device::cuda(1), DType::f16), DeviceError, "cuda");
  EXPECT_DDP_ERROR(Tensor::zeros({2}, Device::cuda(0)), DeviceError, "cuda:0");
  EXPECT_DDP_ERROR(Tensor::from_vector<float>({1, 2}, {2}, Device::cuda(0)), DeviceError, "cuda");
  // The tensor is still usable afterwards.
  EXPECT_THAT(values(x), ElementsAre(0, 1, 2, 3));
}

TEST(TensorCopy, ItemAndToVector) {
  EXPECT_EQ(Tensor::from_vector<float>({2.5f}, {1, 1}).item<float>(), 2.5f);
  EXPECT_EQ(Tensor::scalar(2.5).item<double>(), 2.5);
  EXPECT_EQ(Tensor::scalar(3.7).item<int64_t>(), 3);  // item<T> casts like to(dtype)
  EXPECT_EQ(Tensor::scalar(7, DType::u8).item<uint8_t>(), 7);
  Tensor x = arange_tensor({3, 4});
  EXPECT_EQ(x.select(0, 2).select(0, 3).item<float>(), 11.0f);
  EXPECT_THAT(x.narrow(1, 1, 2).to_vector<float>(), ElementsAre(1, 2, 5, 6, 9, 10));
  EXPECT_THAT(x.t().to_vector<int32_t>(), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
  std::vector<Half> h = x.narrow(0, 0, 1).to_vector<Half>();
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(float(h[3]), 3.0f);
  EXPECT_TRUE(Tensor::zeros({0}).to_vector<float>().empty());
}

TEST(TensorCopy, ItemNeedsExactlyOneElement) {
  EXPECT_DDP_ERROR(Tensor::zeros({2}).item<float>(), ValueError, "item");
  EXPECT_DDP_ERROR(Tensor::zeros({2}).item<float>(), ValueError, "f32[2] on cpu");
  EXPECT_DDP_ERROR(Tensor::zeros({0}).item<float>(), ValueError, "item");
  EXPECT_DDP_ERROR(Tensor::zeros({1, 2}, DType::i64).item<int64_t>(), ValueError, "item");
}

TEST(TensorCopy, FillAndZero) {
  Tensor x = arange_tensor({3, 4});
  x.narrow(1, 1, 2).fill_(7);
  EXPECT_THAT(raw_values(x), ElementsAre(0, 7, 7, 3, 4, 7, 7, 7, 8, 7, 7, 11));
  x.select(1, 3).zero_();
  EXPECT_THAT(raw_values(x), ElementsAre(0, 7, 7, 0, 4, 7, 7, 0, 8, 7, 7, 0));
  Tensor& r = x.zero_();
  EXPECT_TRUE(r.is_same(x));
  EXPECT_THAT(raw_values(x), ElementsAreArray(std::vector<double>(12, 0)));
  for (DType dt : kAllDTypes) {
    Tensor t = Tensor::zeros({3}, dt);
    t.fill_(1);
    EXPECT_THAT(raw_values(t), ElementsAre(1, 1, 1)) << dtype_name(dt);
  }
  Tensor s = Tensor::scalar(0);
  s.fill_(3);
  EXPECT_EQ(s.item<float>(), 3.0f);
  EXPECT_DDP_ERROR(Tensor::zeros({3, 1}).expand({3, 4}).fill_(1), ValueError, "fill_");
}

// ---- in-place arithmetic -------------------------------------------------------

TEST(TensorInPlace, AddSubMulDiv) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {4});
  Tensor b = Tensor::from_vector<float>({10, 20, 30, 40}, {4});
  Tensor& r = a.add_(b);
  EXPECT_TRUE(r.is_same(a));
  EXPECT_THAT(raw_values(a), ElementsAre(11, 22, 33, 44));
  a.add_(b, -0.5);
  EXPECT_THAT(raw_values(a), ElementsAre(6, 12, 18, 24));
  a.sub_(Tensor::ones({4}));
  EXPECT_THAT(raw_values(a), ElementsAre(5, 11, 17, 23));
  a.mul_(Tensor::from_vector<float>({2, 0, -1, 1}, {4}));
  EXPECT_THAT(raw_values(a), ElementsAre(10, 0, -17, 23));
  a.mul_(2.0);
  EXPECT_THAT(raw_values(a), ElementsAre(20, 0, -34, 46));
  a.div_(Tensor::from_vector<float>({4, 1, 2, 2}, {4}));
  EXPECT_THAT(raw_values(a), ElementsAre(5, 0, -17, 23));
  // b is untouched.
  EXPECT_THAT(raw_values(b), ElementsAre(10, 20, 30, 40));
}

TEST(TensorInPlace, BroadcastScalarCastAndAlias) {
  Tensor a = Tensor::zeros({2, 3});
  a.add_(Tensor::from_vector<float>({1, 2, 3}, {3}));
  EXPECT_THAT(raw_values(a), ElementsAre(1, 2, 3, 1, 2, 3));
  a.mul_(Tensor::from_vector<float>({10, 100}, {2, 1}));
  EXPECT_THAT(raw_values(a), ElementsAre(10, 20, 30, 100, 200, 300));
  a.div_(Tensor::scalar(10));
  EXPECT_THAT(raw_values(a), ElementsAre(1, 2, 3, 10, 20, 30));
  // other of another dtype is cast to this dtype.
  a.add_(Tensor::from_vector<int64_t>({1, 1, 1}, {3}, DType::i64));
  EXPECT_THAT(raw_values(a), ElementsAre(2, 3, 4, 11, 21, 31));
  a.add_(a);  // aliasing
  EXPECT_THAT(raw_values(a), ElementsAre(4, 6, 8, 22, 42, 62));
  // Integers, with integer division.
  Tensor i = Tensor::from_vector<int32_t>({7, -7, 9}, {3}, DType::i32);
  i.div_(Tensor::from_vector<int32_t>({2, 2, 3}, {3}, DType::i32));
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_THAT(raw_values(i), ElementsAre(3, -3, 3));
  Tensor h = Tensor::ones({3}, DType::bf16);
  h.mul_(3.0);
  EXPECT_THAT(raw_values(h), ElementsAre(3, 3, 3));
}

TEST(TensorInPlace, IntoNonContiguousViews) {
  Tensor base = arange_tensor({3, 4});
  base.t().add_(Tensor::ones({4, 3}));
  EXPECT_THAT(raw_values(base), ElementsAreArray(iota_values(12, 1)));
  base.narrow(1, 0, 2).mul_(2.0);
  EXPECT_THAT(raw_values(base), ElementsAre(2, 4, 3, 4, 10, 12, 7, 8, 18, 20, 11, 12));
  base.slice(1, 1, 4, 2).div_(Tensor::full({3, 2}, 2.0));
  EXPECT_THAT(raw_values(base), ElementsAre(2, 2, 3, 2, 10, 6, 7, 4, 18, 10, 11, 6));
  base.select(0, 1).sub_(Tensor::scalar(10));
  EXPECT_THAT(raw_values(base), ElementsAre(2, 2, 3, 2, 0, -4, -3, -6, 18, 10, 11, 6));
  // The same with a transposed, broadcast operand.
  Tensor m = Tensor::zeros({2, 3});
  m.t().add_(Tensor::from_vector<float>({1, 2}, {2}));
  EXPECT_THAT(raw_values(m), ElementsAre(1, 1, 1, 2, 2, 2));
}

TEST(TensorInPlace, Errors) {
  Tensor a = Tensor::zeros({2, 3});
  EXPECT_DDP_ERROR(a.add_(Tensor::zeros({4})), ShapeError, "add_");
  EXPECT_DDP_ERROR(a.mul_(Tensor::zeros({3, 3})), ShapeError, "mul_");
  // Broadcasting only goes into other, never into this.
  EXPECT_DDP_ERROR(Tensor::zeros({3}).add_(Tensor::zeros({2, 3})), ShapeError, "add_");
  EXPECT_DDP_ERROR(Tensor::zeros({2}, DType::bool_).add_(Tensor::zeros({2}, DType::bool_)),
                   DTypeError, "add_");
  EXPECT_DDP_ERROR(Tensor::zeros({3, 1}).expand({3, 4}).add_(Tensor::ones({3, 4})), ValueError,
                   "add_");
  EXPECT_DDP_ERROR(Tensor::zeros({3, 1}).expand({3, 4}).div_(Tensor::ones({3, 4})), ValueError,
                   "div_");
}

TEST(TensorInPlace, RefusedOnATensorThatRequiresGradUnlessNoGrad) {
  Tensor w = Tensor::ones({2}, TensorOptions().requires_grad());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_DDP_ERROR(w.add_(Tensor::ones({2})), ValueError, "add_");
  EXPECT_DDP_ERROR(w.fill_(0), ValueError, "fill_");
  EXPECT_DDP_ERROR(w.copy_(Tensor::ones({2})), ValueError, "copy_");
  {
    NoGradGuard no_grad;
    w.add_(Tensor::ones({2}));
    w.mul_(3.0);
  }
  EXPECT_THAT(raw_values(w), ElementsAre(6, 6));
  // detach() shares the data and may be written.
  w.detach().fill_(1);
  EXPECT_THAT(raw_values(w), ElementsAre(1, 1));
}


}  // namespace
}  // namespace ddp
