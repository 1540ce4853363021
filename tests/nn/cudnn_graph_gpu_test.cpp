// GPU tests of the cuDNN graph layers' robustness fixes (label gpu, skipped
// without a usable GPU); their CPU-side decisions are unit-tested in
// tests/nn/cudnn_policy_test.cpp and tests/nn/cudnn_graph_cache_test.cpp.
// - Note [cuDNN pointer alignment]: conv2d and batch_norm on views at odd
//   offsets (inputs, parameters, outputs) match the CPU;
// - Note [cuDNN convolution] bias: bf16 bias forward and gradient on NHWC,
//   the gradient accumulated in f32;
// - Note [Per-thread graph caches]: convolutions from several threads at
//   once, each building its own graphs;
// - Note [cuDNN workspace fallback]: with workspaces refused, a plan
//   without one runs, or an OutOfMemoryError names the plans;
// - the batch-norm cache is leaked: a process that ran the graphs exits
//   cleanly.
//
// Tolerances as conv_gpu_test.cpp's: f32 1e-4 (TF32 off), f16 5e-3,
// bf16 3e-2 against the f32 CPU result; gradients twice that.

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/error.h"
#include "ddp/nn/cudnn.h"
#include "ddp/nn/functional/batch_norm.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "kernel_list.h"
#include "nn/conv_golden_util.h"
#include "cuda/cudnn_policy.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;
namespace cp = nn::cudnn_policy;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason()

double tolerance(DType dt) {
  switch (dt) {
    case DType::f16:
      return 5e-3;
    case DType::bf16:
      return 3e-2;
    default:
      return 1e-4;
  }
}

// t's values as a view `offset` elements into a fresh buffer on `device` in
// dtype dt: misaligned for any offset that is not a multiple of 16 bytes.
// channels_last views a 4-D t NHWC.
Tensor view_at_offset(const Tensor& t, int64_t offset, Device device, DType dt,
                      bool channels_last = false) {
  Tensor flat = Tensor::zeros({offset + t.numel()}, TensorOptions(dt).device(device));
  Tensor v = flat.narrow(0, offset, t.numel());
  if (channels_last) {
    v = v.view({t.size(0), t.size(2), t.size(3), t.size(1)}).permute({0, 3, 1, 2});
  } else {
    v = v.view(t.shape());
  }
  autograd::NoGradGuard no_grad;
  v.copy_(t);
  return v;
}

struct ConvResult {
  Tensor y, dx, dw, db;
};

ConvResult conv_step(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Tensor& dy,
                     const F::Conv2dParams& p) {
  Tensor x = x_in.detach().set_requires_grad();
  Tensor w = w_in.detach().set_requires_grad();
  Tensor b = b_in.detach().set_requires_grad();
  Tensor y = F::conv2d(x, w, b, p);
  y.backward(dy.to(y.device(), y.dtype()));
  auto host = [](const Tensor& t) { return t.cpu().to(DType::f32); };
  return {host(y), host(x.grad()), host(w.grad()), host(b.grad())};
}

// conv2d with x, w and b views at odd offsets (x NCHW and NHWC): the
// graphs assume 16-byte-aligned pointers, so without the staging copies
// sm90 computes garbage and sm80 faults.
TEST(CudnnGraphGpu, ConvOnMisalignedViewsMatchesCpu) {
  SKIP_WITHOUT_GPU();
  nn::cudnn::AllowTf32Guard no_tf32(false);
  manual_seed(101);
  const Tensor x = randn({2, 8, 10, 9}), w = randn({16, 8, 3, 3}), b = randn({16});
  const F::Conv2dParams p{1, 1, 1, 1};
  const Tensor dy = randn({2, 16, 10, 9});
  const ConvResult want = conv_step(x, w, b, dy, p);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (bool nhwc : {false, true}) {
      for (int64_t off : {1, 3}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dt) << (nhwc ? " nhwc" : " nchw") << " offset " << off);
        const Device cuda = Device::cuda();
        Tensor xv = view_at_offset(x, off, cuda, dt, nhwc);
        Tensor wv = view_at_offset(w, off + 2, cuda, dt, nhwc);
        Tensor bv = view_at_offset(b, off, cuda, dt);
        ASSERT_FALSE(cp::is_aligned(xv));
        ASSERT_FALSE(cp::is_aligned(bv));
        Tensor dyv = view_at_offset(dy, off, cuda, dt, nhwc);
        const ConvResult got = conv_step(xv, wv, bv, dyv, p);
        const double tol = tolerance(dt);
        EXPECT_REL_NEAR(got.y, want.y, tol);
        EXPECT_REL_NEAR(got.dx, want.dx, 2 * tol);
        EXPECT_REL_NEAR(got.dw, want.dw, 2 * tol);
        EXPECT_REL_NEAR(got.db, want.db, 2 * tol);
      }
    }
  }
}

// The kernels themselves, given misaligned outputs (y, dx, dw): each is
// computed into aligned scratch and copied into the caller's view, and the
// buffer around the view is left alone.
TEST(CudnnGraphGpu, ConvKernelsWriteMisalignedOutputs) {
  SKIP_WITHOUT_GPU();
  nn::cudnn::AllowTf32Guard no_tf32(false);
  manual_seed(102);
  const Device cuda = Device::cuda();
  kernels::ConvGeometry g;
  g.n = 2, g.c = 4, g.h = 6, g.w = 5, g.o = 8, g.kh = 3, g.kw = 3, g.oh = 6, g.ow = 5;
  g.padding = 1, g.has_bias = true, g.dtype = DType::f16;
  const TensorOptions half = TensorOptions(DType::f16).device(cuda);
  Tensor x = randn({2, 4, 6, 5}).to(cuda, DType::f16), w = randn({8, 4, 3, 3}).to(cuda, DType::f16);
  Tensor b = randn({8}).to(cuda, DType::f16), dy = randn({2, 8, 6, 5}).to(cuda, DType::f16);
  auto sentinel_view = [&](const Shape& s) {
    Tensor flat = Tensor::full({shape_numel(s) + 2}, 7.0, half);
    return std::pair{flat, flat.narrow(0, 1, shape_numel(s)).view(s)};
  };
  // Aligned references.
  Tensor y_ref = Tensor::empty({2, 8, 6, 5}, half), dx_ref = Tensor::empty({2, 4, 6, 5}, half);
  Tensor dw_ref = Tensor::empty({8, 4, 3, 3}, half), db_ref = Tensor::empty({8}, half);
  kernels::call<kernels::conv2d_forward>(cuda, g, x, w, b, y_ref);
  kernels::call<kernels::conv2d_backward_data>(cuda, g, dy, w, dx_ref);
  kernels::call<kernels::conv2d_backward_weight>(cuda, g, x, dy, dw_ref, db_ref);
  auto [y_buf, y] = sentinel_view({2, 8, 6, 5});
  auto [dx_buf, dx] = sentinel_view({2, 4, 6, 5});
  auto [dw_buf, dw] = sentinel_view({8, 4, 3, 3});
  auto [db_buf, db] = sentinel_view({8});
  ASSERT_FALSE(cp::is_aligned(y));
  kernels::call<kernels::conv2d_forward>(cuda, g, x, w, b, y);
  kernels::call<kernels::conv2d_backward_data>(cuda, g, dy, w, dx);
  kernels::call<kernels::conv2d_backward_weight>(cuda, g, x, dy, dw, db);
  auto f32 = [](const Tensor& t) { return t.cpu().to(DType::f32); };
  EXPECT_REL_NEAR(f32(y), f32(y_ref), 1e-3);
  EXPECT_REL_NEAR(f32(dx), f32(dx_ref), 1e-3);
  EXPECT_REL_NEAR(f32(dw), f32(dw_ref), 1e-3);
  EXPECT_REL_NEAR(f32(db), f32(db_ref), 1e-3);
  for (const Tensor* buf : {&y_buf, &dx_buf, &dw_buf, &db_buf}) {
    const std::vector<float> v = buf->cpu().to(DType::f32).to_vector<float>();
    EXPECT_EQ(v.front(), 7.0f);
    EXPECT_EQ(v.back(), 7.0f);
  }
}

// batch_norm (training forward and backward, eval forward) with x, its
// parameters and running statistics as views at odd offsets.
TEST(CudnnGraphGpu, BatchNormOnMisalignedViewsMatchesCpu) {
  SKIP_WITHOUT_GPU();
  manual_seed(103);
  const int64_t c = 6;
  const Tensor x = randn({4, c, 5, 7}), dy = randn({4, c, 5, 7});
  const Tensor w = randn({c}) * 0.1 + 1.0, b = randn({c}) * 0.1;
  auto run = [&](Device dev, DType dt, bool nhwc, int64_t off, bool training) {
    Tensor xv = off ? view_at_offset(x, off, dev, dt, nhwc) : x.to(dev, dt);
    if (!off && nhwc) xv = F::to_channels_last(xv);
    xv = xv.detach().set_requires_grad();
    Tensor wv =
        (off ? view_at_offset(w, off, dev, DType::f32) : w.to(dev)).detach().set_requires_grad();
    Tensor bv = (off ? view_at_offset(b, off + 1, dev, DType::f32) : b.to(dev))
                    .detach()
                    .set_requires_grad();
    Tensor rm =
        off ? view_at_offset(Tensor::zeros({c}), off, dev, DType::f32) : Tensor::zeros({c}).to(dev);
    Tensor rv = off ? view_at_offset(Tensor::ones({c}), off + 2, dev, DType::f32)
                    : Tensor::ones({c}).to(dev);
    Tensor y = F::batch_norm(xv, rm, rv, wv, bv, training);
    Tensor g = dy.to(dev, dt);
    y.backward(nhwc ? F::to_channels_last(g) : g);
    auto host = [](const Tensor& t) { return t.cpu().to(DType::f32); };
    return std::tuple{host(y),         host(xv.grad()), host(wv.grad()),
                      host(bv.grad()), host(rm),        host(rv)};
  };
  for (bool training : {true, false}) {
    const auto want = run(Device::cpu(), DType::f32, false, 0, training);
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      for (bool nhwc : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (nhwc ? " nhwc" : " nchw")
                                          << (training ? " training" : " eval"));
        const auto got = run(Device::cuda(), dt, nhwc, 1, training);
        const double tol = tolerance(dt);
        EXPECT_REL_NEAR(std::get<0>(got), std::get<0>(want), tol);
        EXPECT_REL_NEAR(std::get<1>(got), std::get<1>(want), 2 * tol);
        EXPECT_REL_NEAR(std::get<2>(got), std::get<2>(want), 2 * tol);
        EXPECT_REL_NEAR(std::get<3>(got), std::get<3>(want), 2 * tol);
        EXPECT_REL_NEAR(std::get<4>(got), std::get<4>(want), tol);
        EXPECT_REL_NEAR(std::get<5>(got), std::get<5>(want), tol);
      }
    }
  }
}

// bf16 with a bias on NHWC (the legacy bias calls documented no bf16): the
// forward against the CPU, the bias gradient against the f64 sum of the
// same bf16 dy, rounded once.
TEST(CudnnGraphGpu, ConvBiasBf16ChannelsLast) {
  SKIP_WITHOUT_GPU();
  manual_seed(104);
  const Tensor x = randn({4, 16, 12, 12}), w = randn({32, 16, 3, 3}) * 0.1, b = randn({32});
  const Tensor dy = randn({4, 32, 12, 12}).to(DType::bf16).to(DType::f32);
  const F::Conv2dParams p{1, 1, 1, 1};
  const ConvResult want = conv_step(x, w, b, dy, p);
  const Device cuda = Device::cuda();
  const ConvResult got = conv_step(
      F::to_channels_last(x.to(cuda, DType::bf16)), F::to_channels_last(w.to(cuda, DType::bf16)),
      b.to(cuda, DType::bf16), F::to_channels_last(dy.to(cuda, DType::bf16)), p);
  EXPECT_REL_NEAR(got.y, want.y, 3e-2);
  EXPECT_REL_NEAR(got.dx, want.dx, 6e-2);
  const std::vector<double> db_want = sum(dy.to(DType::f64), {0, 2, 3}).to_vector<double>();
  const std::vector<double> db_got = got.db.to(DType::f64).to_vector<double>();
  ASSERT_EQ(db_got.size(), db_want.size());
  for (size_t i = 0; i < db_want.size(); ++i)
    EXPECT_NEAR(db_got[i], db_want[i], std::abs(db_want[i]) * 0x1p-8 + 1e-3) << "channel " << i;
}

// 65 536 output positions per channel and dy = 1: a 16-bit accumulator
// would stop far short; the f32-accumulated sum is exactly 65536 in bf16.
TEST(CudnnGraphGpu, ConvBiasGradientAccumulatesInF32) {
  SKIP_WITHOUT_GPU();
  const Device cuda = Device::cuda();
  for (bool nhwc : {false, true}) {
    SCOPED_TRACE(nhwc ? "nhwc" : "nchw");
    Tensor x = Tensor::zeros({64, 4, 32, 32}, TensorOptions(DType::bf16).device(cuda));
    if (nhwc) x = F::to_channels_last(x);
    Tensor w = Tensor::zeros({3, 4, 1, 1}, TensorOptions(DType::bf16).device(cuda));
    Tensor b = Tensor::zeros({3}, TensorOptions(DType::bf16).device(cuda)).set_requires_grad();
    sum(F::conv2d(x, w, b)).backward();
    EXPECT_EQ(b.grad().cpu().to(DType::f64).to_vector<double>(),
              (std::vector<double>{65536.0, 65536.0, 65536.0}));
  }
}

// Several threads run convolutions at once, each on its own graphs (Note
// [Per-thread graph caches]); results match the main thread's.
TEST(CudnnGraphGpu, ConvolutionsFromManyThreadsAtOnce) {
  SKIP_WITHOUT_GPU();
  nn::cudnn::AllowTf32Guard no_tf32(false);
  manual_seed(105);
  const Device cuda = Device::cuda();
  // A shape no other test uses, so every thread's shard lacks it.
  const Tensor x = randn({3, 5, 11, 13}, cuda), w = randn({7, 5, 3, 3}, cuda), b = randn({7}, cuda);
  const F::Conv2dParams p{1, 1, 1, 1};
  const Tensor dy = randn({3, 7, 11, 13}, cuda);
  const ConvResult want = conv_step(x, w, b, dy, p);
  const F::ConvCacheStats before = F::conv2d_cache_stats(DeviceType::CUDA);
  constexpr int kThreads = 4, kIters = 20;
  std::barrier together(kThreads);
  std::vector<double> worst(kThreads, 0.0);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        cuda::set_device(0);
        together.arrive_and_wait();
        for (int i = 0; i < kIters; ++i) {
          const ConvResult got = conv_step(x, w, b, dy, p);
          for (auto [a, r] : {std::pair{got.y, want.y}, std::pair{got.dx, want.dx},
                              std::pair{got.dw, want.dw}, std::pair{got.db, want.db}})
            worst[size_t(t)] = std::max(worst[size_t(t)], rel_error(a, r));
        }
        cuda::synchronize();
        together.arrive_and_wait();  // no thread exits while others run
      } catch (const std::exception& e) {
        errors[size_t(t)] = e.what();
        together.arrive_and_drop();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[size_t(t)], "") << "thread " << t;
    EXPECT_LE(worst[size_t(t)], 1e-5) << "thread " << t;
  }
  const F::ConvCacheStats after = F::conv2d_cache_stats(DeviceType::CUDA);
  // Each thread built its own forward, dgrad and wgrad graphs.
  EXPECT_GE(after.misses - before.misses, 3 * kThreads);
}

// Note [cuDNN workspace fallback]: with every workspace refused, a plan
// that needs none runs (matching the CPU), or the error is an
// OutOfMemoryError naming the plans tried, never a cuDNN failure.
TEST(CudnnGraphGpu, ConvRunsWithoutWorkspaceOrSaysWhy) {
  SKIP_WITHOUT_GPU();
  nn::cudnn::AllowTf32Guard no_tf32(false);
  manual_seed(106);
  const Tensor x = randn({8, 32, 28, 28}), w = randn({64, 32, 3, 3}) * 0.1, b = randn({64});
  const Tensor dy = randn({8, 64, 28, 28});
  const F::Conv2dParams p{1, 1, 1, 1};
  const ConvResult want = conv_step(x, w, b, dy, p);
  for (DType dt : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Device cuda = Device::cuda();
    cp::ScopedWorkspaceLimit none(0);
    try {
      const ConvResult got =
          conv_step(x.to(cuda, dt), w.to(cuda, dt), b.to(cuda, dt), dy.to(cuda, dt), p);
      const double tol = tolerance(dt);
      EXPECT_REL_NEAR(got.y, want.y, tol);
      EXPECT_REL_NEAR(got.dx, want.dx, 2 * tol);
      EXPECT_REL_NEAR(got.dw, want.dw, 2 * tol);
      std::cout << "[ info ] " << dtype_name(dt) << ": every pass ran without a workspace\n";
    } catch (const OutOfMemoryError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("no plan's workspace fits"), std::string::npos) << m;
      EXPECT_NE(m.find("ScopedWorkspaceLimit(0)"), std::string::npos) << m;
      std::cout << "[ info ] " << dtype_name(dt) << ": " << m << "\n";
    }
  }
}

// Builds batch-norm and conv graphs, then exits through std::exit, which
// runs the static destructors.
[[noreturn]] void build_graphs_and_exit() {
  const Device cuda = Device::cuda();
  Tensor x = randn({2, 4, 6, 6}, cuda).to(DType::f16);
  Tensor rm = Tensor::zeros({4}, cuda), rv = Tensor::ones({4}, cuda);
  Tensor y = F::batch_norm(x, rm, rv, Tensor(), Tensor(), true);
  Tensor z = F::conv2d(y, Tensor::ones({4, 4, 3, 3}, TensorOptions(DType::f16).device(cuda)));
  cuda::synchronize();
  std::exit(z.numel() > 0 ? 0 : 1);
}

// The batch-norm graph cache is leaked like conv's and attention's: a
// process that built graphs exits with status 0 (a cache destroyed at exit
// can run after cuDNN unloaded its engine libraries).
TEST(CudnnGraphGpu, ProcessWithBuiltGraphsExitsCleanly) {
  SKIP_WITHOUT_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process, not a fork
  EXPECT_EXIT(build_graphs_and_exit(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace ddp::test
