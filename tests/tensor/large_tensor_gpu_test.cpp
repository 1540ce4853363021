// CUDA tensors of more than 2^31 elements (label gpu): element-wise kernels,
// reductions, casts, narrow views and host copies must index with 64 bits.
// A kernel that computes a flat index in int32 wraps at 2^31 and writes the
// wrong elements or none; every check below reads elements past 2^31.
// Needs about 22 GB of free GPU memory; skips with a message otherwise.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/runtime_versions.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"

namespace ddp {
namespace {

constexpr int64_t kRow = 1024;
constexpr int64_t kN = (int64_t(1) << 31) + 4 * kRow;  // 2^31 + 4,096 elements
constexpr size_t kNeeded = size_t(22) << 30;           // f16 x and y, their f32 copy, slack

bool room_for_it(std::string* why) {
  if (!cuda::is_available()) {
    *why = "no GPU: " + cuda::unavailable_reason();
    return false;
  }
  cuda::empty_cache();
  const RuntimeVersions v = runtime_versions();
  const size_t free_bytes = v.gpus.empty() ? 0 : v.gpus[0].free_memory_bytes;
  if (free_bytes < kNeeded) {
    *why = "needs " + std::to_string(kNeeded >> 30) + " GiB of free GPU memory, " +
           std::to_string(free_bytes >> 30) + " GiB free";
    return false;
  }
  return true;
}

std::vector<float> host(const Tensor& t) { return t.cpu().to(kFloat32).contiguous().to_vector<float>(); }

TEST(LargeTensorGpu, ElementwiseReductionAndCopiesPast2Pow31) {
  std::string why;
  if (!room_for_it(&why)) GTEST_SKIP() << why;
  const Device dev = Device::cuda(0);
  Tensor y;
  {
    Tensor x = Tensor::full({kN}, 1.0, TensorOptions(kFloat16).device(dev));
    ASSERT_EQ(x.numel(), kN);
    y = x * 2.0 + 1.0;  // 3 everywhere
  }
  // Mark the last element and one just past 2^31 through views.
  y.narrow(0, kN - 1, 1).fill_(5.0);
  y.narrow(0, int64_t(1) << 31, 1).fill_(-1.0);

  EXPECT_EQ(host(y.narrow(0, 0, 4)), (std::vector<float>{3, 3, 3, 3}));
  std::vector<float> tail = host(y.narrow(0, kN - 3 * kRow, 3 * kRow));
  for (int64_t i = 0; i < 3 * kRow - 1; ++i)
    ASSERT_EQ(tail[size_t(i)], (kN - 3 * kRow + i == int64_t(1) << 31) ? -1.0f : 3.0f) << i;
  EXPECT_EQ(tail.back(), 5.0f);

  // Whole-tensor reductions see the far elements.
  EXPECT_EQ(max(y).cpu().to(kFloat32).item<float>(), 5.0f);
  EXPECT_EQ(min(y).cpu().to(kFloat32).item<float>(), -1.0f);
  // Row sums: 1,024 threes = 3,072, exact in f16; the last row has the 5,
  // the row at 2^31 the -1.
  Tensor rows = sum(y.view({kN / kRow, kRow}), {1});
  ASSERT_EQ(rows.numel(), kN / kRow);
  std::vector<float> r = host(rows);
  EXPECT_EQ(r.front(), 3072.0f);
  EXPECT_EQ(r[size_t((int64_t(1) << 31) / kRow)], 3068.0f);
  EXPECT_EQ(r.back(), 3074.0f);

  // A cast to f32 (8.6 GB) keeps the far values where they were.
  Tensor z = y.to(kFloat32);
  EXPECT_EQ(host(z.narrow(0, kN - 2, 2)), (std::vector<float>{3, 5}));
  EXPECT_EQ(host(z.narrow(0, int64_t(1) << 31, 2)), (std::vector<float>{-1, 3}));
}

}  // namespace
}  // namespace ddp
