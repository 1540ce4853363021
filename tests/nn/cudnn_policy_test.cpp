// The cuDNN layers' decisions that need no GPU (kernels/cuda/cudnn_policy.h):
// - Note [cuDNN pointer alignment]: which operands are staged, and that
//   staging keeps values and layout and writes outputs back;
// - Note [cuDNN workspace fallback]: the order plans are tried in when a
//   workspace does not fit, and the message when none does;
// - the conv bias path, and the bias gradient's f32 accumulation (shown
//   with sums a 16-bit accumulator could not reach);
// - channel_sum, the wrappers' per-channel sum below the ops frontend: bit
//   for bit sum(t, {0, 2, ...}) in every layout and dtype.
// Run on CPU tensors; the GPU side is tests/nn/cudnn_graph_gpu_test.cpp.

#include "cuda/cudnn_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"

namespace ddp {
namespace {

namespace cp = nn::cudnn_policy;
using nn::functional::is_channels_last;
using nn::functional::to_channels_last;

// ---- alignment ------------------------------------------------------------------

TEST(CudnnPolicyAlignment, PointerAlignment) {
  alignas(64) unsigned char buf[64] = {};
  EXPECT_TRUE(cp::is_aligned(buf));
  EXPECT_TRUE(cp::is_aligned(buf + 16));
  EXPECT_FALSE(cp::is_aligned(buf + 2));
  EXPECT_FALSE(cp::is_aligned(buf + 8));
  EXPECT_TRUE(cp::is_aligned(buf + 8, 8));
  EXPECT_EQ(cp::kAlignment, 16);
}

TEST(CudnnPolicyAlignment, TensorsFreshAreAlignedViewsAtOddOffsetsAreNot) {
  Tensor base = Tensor::zeros({65});
  EXPECT_TRUE(cp::is_aligned(base));
  EXPECT_TRUE(cp::is_aligned(base.narrow(0, 4, 8)));   // 16 bytes in
  EXPECT_FALSE(cp::is_aligned(base.narrow(0, 1, 8)));  // 4 bytes in
  EXPECT_FALSE(cp::is_aligned(Tensor::zeros({9}, TensorOptions(DType::bf16)).narrow(0, 1, 8)));
  EXPECT_TRUE(cp::is_aligned(Tensor()));  // nothing bound
}

TEST(CudnnPolicyAlignment, AlignedOperandsPassThroughUntouched) {
  cp::AlignedOperands ops;
  Tensor x = randn({2, 3, 4, 5});
  EXPECT_TRUE(ops.input(x).is_same(x));
  EXPECT_TRUE(ops.output(x).is_same(x));
  EXPECT_FALSE(ops.input(Tensor()).defined());
  EXPECT_FALSE(ops.output(Tensor()).defined());
  ops.finish();
  EXPECT_EQ(ops.staged(), 0);
}

// A misaligned input is copied to aligned memory with the same values and,
// for a channels-last view, the same layout (the cache key and the kernel
// contract see NHWC strides still).
TEST(CudnnPolicyAlignment, MisalignedInputsAreCopiedInTheirLayout) {
  for (bool nhwc : {false, true}) {
    SCOPED_TRACE(nhwc ? "nhwc" : "nchw");
    Tensor flat = randn({1 + 2 * 3 * 4 * 5});
    Tensor x = flat.narrow(0, 1, 2 * 3 * 4 * 5);  // 4 bytes past an aligned block
    x = nhwc ? x.view({2, 4, 5, 3}).permute({0, 3, 1, 2}) : x.view({2, 3, 4, 5});
    ASSERT_FALSE(cp::is_aligned(x));
    ASSERT_EQ(is_channels_last(x), nhwc);
    cp::AlignedOperands ops;
    Tensor a = ops.input(x);
    EXPECT_FALSE(a.is_same(x));
    EXPECT_TRUE(cp::is_aligned(a));
    EXPECT_EQ(a.shape(), x.shape());
    EXPECT_EQ(a.strides(), x.strides());
    EXPECT_EQ(is_channels_last(a), nhwc);
    EXPECT_EQ(a.to_vector<float>(), x.to_vector<float>());
    EXPECT_EQ(ops.staged(), 1);
  }
}

// A misaligned output gets aligned scratch; finish() copies the scratch
// into the caller's view and nothing around it.
TEST(CudnnPolicyAlignment, MisalignedOutputsAreWrittenBackByFinish) {
  Tensor flat = Tensor::full({10}, -1.0);
  Tensor y = flat.narrow(0, 1, 8).view({2, 4});
  cp::AlignedOperands ops;
  Tensor out = ops.output(y);
  ASSERT_FALSE(out.is_same(y));
  EXPECT_TRUE(cp::is_aligned(out));
  EXPECT_EQ(out.shape(), y.shape());
  out.copy_(arange(0, 8, 1, DType::f32).view({2, 4}));  // "the kernel writes"
  EXPECT_EQ(flat.to_vector<float>()[1], -1.0f);         // not yet
  ops.finish();
  EXPECT_EQ(flat.to_vector<float>(), (std::vector<float>{-1, 0, 1, 2, 3, 4, 5, 6, 7, -1}));
  EXPECT_EQ(ops.staged(), 1);
}

// ---- workspace fallback -------------------------------------------------------------

// Plans with these workspaces (nullopt: cannot be built) and a memory that
// holds at most `free_bytes`; records what was asked for.
struct FakeGpu {
  FakeGpu(std::vector<std::optional<int64_t>> w, int64_t f) : ws(std::move(w)), free_bytes(f) {}
  std::vector<std::optional<int64_t>> ws;
  int64_t free_bytes = 0;
  std::vector<int64_t> queried, allocated;

  cp::WorkspaceChoice choose(int64_t primary) {
    return cp::choose_plan(
        primary, int64_t(ws.size()),
        [&](int64_t i) {
          queried.push_back(i);
          return ws[size_t(i)];
        },
        [&](int64_t bytes) {
          allocated.push_back(bytes);
          return bytes <= free_bytes;
        });
  }
};

TEST(CudnnPolicyWorkspace, TheFirstChoiceRunsWhenItFits) {
  FakeGpu gpu{{100, 10, 0}, 1000};
  const cp::WorkspaceChoice c = gpu.choose(0);
  EXPECT_EQ(c.index, 0);
  EXPECT_TRUE(c.failed.empty());
  EXPECT_EQ(gpu.queried, (std::vector<int64_t>{0}));  // later plans not even built
  EXPECT_EQ(gpu.allocated, (std::vector<int64_t>{100}));
}

// The defect: the first choice's workspace does not fit and the next plan's
// does; that plan runs instead of an out-of-memory error.
TEST(CudnnPolicyWorkspace, TheNextPlanThatFitsRunsWhenTheFirstDoesNot) {
  FakeGpu gpu{{1 << 30, 1 << 20}, 64 << 20};
  const cp::WorkspaceChoice c = gpu.choose(0);
  EXPECT_EQ(c.index, 1);
  ASSERT_EQ(c.failed.size(), 1u);
  EXPECT_EQ(c.failed[0].index, 0);
  EXPECT_EQ(c.failed[0].bytes, int64_t(1) << 30);
}

// Later candidates in heuristic order; unbuildable ones and ones needing at
// least a size that already failed are skipped without an allocation; a
// 0-byte workspace needs no allocation at all.
TEST(CudnnPolicyWorkspace, SkipsUnbuildableAndTooLargePlans) {
  FakeGpu gpu{{std::nullopt, 500, std::nullopt, 800, 500, 300, 0, 10}, 100};
  const cp::WorkspaceChoice c = gpu.choose(1);  // plan 0 never built: before the first choice
  EXPECT_EQ(c.index, 6);
  EXPECT_EQ(gpu.queried, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(gpu.allocated, (std::vector<int64_t>{500, 300}));
  EXPECT_EQ(c.unbuildable, 1);
  EXPECT_EQ(c.too_large, 2);  // 800 and 500, not tried after 500 failed
  ASSERT_EQ(c.failed.size(), 2u);
  EXPECT_EQ(c.failed[1].index, 5);
}

TEST(CudnnPolicyWorkspace, NothingFitsIsReportedWithTheSizes) {
  FakeGpu gpu{{int64_t(3) << 30, std::nullopt, int64_t(256) << 20, int64_t(512) << 20}, 1 << 20};
  const cp::WorkspaceChoice c = gpu.choose(0);
  EXPECT_EQ(c.index, -1);
  ASSERT_EQ(c.failed.size(), 2u);
  const std::string m = cp::describe(c);
  EXPECT_NE(m.find("no plan's workspace fits"), std::string::npos) << m;
  EXPECT_NE(m.find("plan 0 needs 3.00 GiB"), std::string::npos) << m;
  EXPECT_NE(m.find("plan 2 needs 256.00 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("1 later plan(s) could not be built"), std::string::npos) << m;
  EXPECT_NE(m.find("1 later plan(s) need at least as much"), std::string::npos) << m;
}

TEST(CudnnPolicyWorkspace, TheFirstChoiceMustBeABuiltPlan) {
  FakeGpu gpu{{std::nullopt, 10}, 100};
  EXPECT_THROW(gpu.choose(0), Error);
  EXPECT_THROW(gpu.choose(2), Error);
}

TEST(CudnnPolicyWorkspace, ScopedLimitNestsAndIsPerThread) {
  const int64_t none = cp::workspace_limit();
  EXPECT_EQ(none, INT64_MAX);
  {
    cp::ScopedWorkspaceLimit outer(1000);
    EXPECT_EQ(cp::workspace_limit(), 1000);
    {
      cp::ScopedWorkspaceLimit inner(0);
      EXPECT_EQ(cp::workspace_limit(), 0);
      int64_t other = 0;
      std::thread([&] { other = cp::workspace_limit(); }).join();
      EXPECT_EQ(other, INT64_MAX);
    }
    EXPECT_EQ(cp::workspace_limit(), 1000);
  }
  EXPECT_EQ(cp::workspace_limit(), none);
}

// ---- conv bias ------------------------------------------------------------------

TEST(CudnnPolicyConvBias, PathOrder) {
  EXPECT_EQ(cp::conv_bias_path(false, true), cp::BiasPath::none);
  EXPECT_EQ(cp::conv_bias_path(false, false), cp::BiasPath::none);
  EXPECT_EQ(cp::conv_bias_path(true, true), cp::BiasPath::in_graph);
  EXPECT_EQ(cp::conv_bias_path(true, false), cp::BiasPath::added_after);
}

// Sums a 16-bit running sum could not reach: 65 536 ones per channel in
// bf16 (a bf16 running sum stalls at 256) and 4096 in f16 (an f16 one
// stalls at 2048). Accumulated in f32 both are exact, and representable.
TEST(CudnnPolicyConvBias, GradientAccumulatesInF32) {
  for (auto [dt, n, want] : {std::tuple{DType::bf16, int64_t(64), 65536.0},
                             std::tuple{DType::f16, int64_t(4), 4096.0}}) {
    for (bool nhwc : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (nhwc ? " nhwc" : " nchw"));
      Tensor dy = Tensor::ones({n, 3, 32, 32}, TensorOptions(dt));
      if (nhwc) dy = to_channels_last(dy);
      Tensor db = cp::conv_bias_grad(dy);
      EXPECT_EQ(db.dtype(), dt);
      EXPECT_EQ(db.shape(), (Shape{3}));
      EXPECT_EQ(db.to(DType::f64).to_vector<double>(), (std::vector<double>{want, want, want}));
    }
  }
}

// Random values: the bf16 result is the f64 sum rounded once (within one
// bf16 rounding step of it), NCHW and NHWC alike.
TEST(CudnnPolicyConvBias, GradientMatchesTheF64SumRoundedOnce) {
  manual_seed(3);
  Tensor dy64 = randn({8, 5, 9, 7}).to(DType::bf16).to(DType::f64);
  const std::vector<double> want = sum(dy64, {0, 2, 3}).to_vector<double>();
  for (bool nhwc : {false, true}) {
    Tensor dy = dy64.to(DType::bf16);
    if (nhwc) dy = to_channels_last(dy);
    const std::vector<double> got = cp::conv_bias_grad(dy).to(DType::f64).to_vector<double>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t c = 0; c < want.size(); ++c)
      EXPECT_NEAR(got[c], want[c], std::abs(want[c]) * 0x1p-8 + 1e-6) << "channel " << c;
  }
}

// channel_sum arranges the sum as sum() does, so the two agree bit for bit:
// NCHW (rows of a channel-major copy), NHWC (columns in place), a strided
// view, 2-D and 3-D inputs, batch 1, every floating dtype.
TEST(CudnnPolicyChannelSum, EqualsSumOverEveryDimButOneBitForBit) {
  manual_seed(11);
  const std::vector<Shape> shapes = {{8, 5, 9, 7}, {1, 6, 4, 4}, {7, 3}, {4, 5, 33}, {3, 1, 2, 2}};
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    for (const Shape& shape : shapes) {
      for (int layout = 0; layout < 3; ++layout) {
        if (layout > 0 && shape.size() != 4) continue;
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << shape_str(shape)
                                          << " layout " << layout);
        Tensor t = randn(shape).to(dt);
        if (layout == 1) t = to_channels_last(t);
        if (layout == 2)  // every other row: neither dense layout
          t = randn({shape[0], shape[1], shape[2] * 2, shape[3]}).to(dt).slice(2, 0, shape[2] * 2, 2);
        std::vector<int64_t> dims{0};
        for (int64_t d = 2; d < t.dim(); ++d) dims.push_back(d);
        const Tensor want = sum(t, dims);
        const Tensor got = cp::channel_sum(t);
        EXPECT_EQ(got.dtype(), dt);
        EXPECT_EQ(got.shape(), (Shape{t.size(1)}));
        const std::vector<double> w = want.to(DType::f64).to_vector<double>();
        const std::vector<double> g = got.to(DType::f64).to_vector<double>();
        ASSERT_EQ(g.size(), w.size());
        for (size_t c = 0; c < w.size(); ++c) EXPECT_EQ(g[c], w[c]) << "channel " << c;
      }
    }
  }
}

TEST(CudnnPolicyChannelSum, EmptyBatchGivesZeros) {
  Tensor t = Tensor::empty({0, 3, 4, 4});
  EXPECT_EQ(cp::channel_sum(t).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(cp::channel_sum(Tensor::empty({2, 0, 3})).numel(), 0);
}

TEST(CudnnPolicyChannelSum, BadInputsRaise) {
  EXPECT_THROW(cp::channel_sum(Tensor()), Error);
  EXPECT_THROW(cp::channel_sum(Tensor::ones({5})), Error);
  EXPECT_THROW(cp::channel_sum(Tensor::ones({2, 3}, TensorOptions(DType::i64))), Error);
}

TEST(CudnnPolicyChannelSum, RecordsNoAutogradAndLeavesItsInputAlone) {
  Tensor t = randn({2, 3, 4, 4}).set_requires_grad();
  const std::vector<float> before = t.detach().to_vector<float>();
  Tensor s = cp::channel_sum(t);
  EXPECT_FALSE(s.requires_grad());
  EXPECT_EQ(s.grad_fn(), nullptr);
  EXPECT_EQ(t.detach().to_vector<float>(), before);
}

TEST(CudnnPolicyConvBias, GradientRecordsNoAutograd) {
  Tensor dy = randn({2, 3, 4, 4}).set_requires_grad();
  Tensor db = cp::conv_bias_grad(dy);
  EXPECT_FALSE(db.requires_grad());
  EXPECT_EQ(db.grad_fn(), nullptr);
}

}  // namespace
}  // namespace ddp
