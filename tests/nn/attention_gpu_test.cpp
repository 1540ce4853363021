// The fused CUDA attention against the reference path, forward and backward;
// skipped without a GPU. f16/bf16 take cuDNN's fused attention where the
// build and the GPU have it, f32 the hand kernel (Note [Attention paths on
// CUDA] in kernels/cuda/attention_cuda.cpp); the cuDNN tests below pit
// the two against each other and against the CPU, and check that the
// log-sum-exp each forward saves is the same quantity.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "ddp/config.h"
#include "ddp/nn/functional/attention.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"
#include "kernel_list.h"
#include "nn/attention_strided_util.h"
#include "nn/scaled_error.h"

using namespace ddp;
using ddp::test::scaled_error;
namespace F = ddp::nn::functional;

namespace {

struct Case {
  int64_t B, H, T, S, D;
  bool causal;
  DType dtype;
  double tol;  // on max|error| / max(1, max|reference|)
};

void run_case(const Case& c) {
  const Device dev = Device::cuda(0);
  Generator gen(42);
  // Inputs drawn in f32 on the CPU, so the fused and the reference path see
  // the same values (the reference runs in f32 on the GPU).
  auto draw = [&](int64_t rows) {
    return randn({c.B, c.H, rows, c.D}, {}, &gen).to(dev);
  };
  Tensor q32 = draw(c.T), k32 = draw(c.S), v32 = draw(c.S), dy32 = draw(c.T);
  auto leaf = [&](const Tensor& t) { return t.to(c.dtype).detach().set_requires_grad(); };
  Tensor q = leaf(q32), k = leaf(k32), v = leaf(v32);
  Tensor y = F::scaled_dot_product_attention(q, k, v, c.causal);
  y.backward(dy32.to(c.dtype));
  Tensor qr = q32.detach().set_requires_grad(), kr = k32.detach().set_requires_grad(),
         vr = v32.detach().set_requires_grad();
  Tensor yr = F::scaled_dot_product_attention_reference(qr, kr, vr, c.causal);
  yr.backward(dy32);
  const std::string what = std::string(dtype_name(c.dtype)) + (c.causal ? " causal" : " full") +
                           " D=" + std::to_string(c.D) + " T=" + std::to_string(c.T);
  EXPECT_LE(scaled_error(y, yr), c.tol) << what << " out";
  EXPECT_LE(scaled_error(q.grad(), qr.grad()), c.tol) << what << " dq";
  EXPECT_LE(scaled_error(k.grad(), kr.grad()), c.tol) << what << " dk";
  EXPECT_LE(scaled_error(v.grad(), vr.grad()), c.tol) << what << " dv";
}

TEST(AttentionGpu, FusedMatchesReference) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  // f32: the only differences are summation order and expf, ~1e-5. bf16/f16:
  // inputs and outputs rounded to 8 / 11 mantissa bits.
  for (bool causal : {true, false})
    for (int64_t D : {16, 64, 128}) {
      run_case({2, 3, 77, causal ? 77 : 50, D, causal, DType::f32, 2e-5});
      run_case({1, 2, 130, causal ? 130 : 33, D, causal, DType::bf16, 3e-2});
      run_case({1, 2, 65, causal ? 65 : 65, D, causal, DType::f16, 5e-3});
    }
}

TEST(AttentionGpu, UnsupportedHeadSizeFallsBackToReference) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  run_case({1, 1, 9, 9, 24, true, DType::f32, 1e-6});  // D=24: the reference path on both sides
}


// ---- cuDNN's fused attention ------------------------------------------------------

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

// Sets DDP_CUDNN_ATTENTION for its lifetime (read on every call: Note
// [Attention paths on CUDA]) and restores what was there.
class CudnnAttentionSetting {
 public:
  explicit CudnnAttentionSetting(bool on) {
    if (const char* old = std::getenv(kVar)) old_ = old;
    ::setenv(kVar, on ? "1" : "0", 1);
  }
  ~CudnnAttentionSetting() {
    if (old_) ::setenv(kVar, old_->c_str(), 1);
    else ::unsetenv(kVar);
  }

 private:
  static constexpr const char* kVar = "DDP_CUDNN_ATTENTION";
  std::optional<std::string> old_;
};

// Whether the fused attention takes a call of this dtype and head size on
// GPU 0, forward and backward (attention_supports reads only the shapes).
bool fused_here(DType dtype, int64_t D, bool needs_backward = true) {
  Tensor q = Tensor::empty({1, 2, 16, D}, TensorOptions(dtype).device(Device::cuda(0)));
  return kernels::call<kernels::attention_supports>(Device::cuda(0), q, q, 0.125f, true,
                                                    needs_backward);
}

// Whether f16 attention with head size 40 (a multiple of 8 the hand kernel
// does not take) is fused on GPU 0: exactly when libddp has cuDNN's path and
// the GPU is new enough for it (and cuDNN builds both graphs).
bool cudnn_attention_here() { return fused_here(DType::f16, 40); }

struct Grads {
  Tensor out, dq, dk, dv;
};

// One forward and backward of the public op on copies of q, k, v in `dtype`
// on `dev`, with dout as the output's gradient.
Grads run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                    DType dtype, Device dev, bool causal, bool reference = false) {
  auto leaf = [&](const Tensor& t) { return t.to(dtype).to(dev).detach().set_requires_grad(); };
  Tensor ql = leaf(q), kl = leaf(k), vl = leaf(v);
  Tensor y = reference ? F::scaled_dot_product_attention_reference(ql, kl, vl, causal)
                       : F::scaled_dot_product_attention(ql, kl, vl, causal);
  y.backward(dout.to(dtype).to(dev));
  return {y, ql.grad(), kl.grad(), vl.grad()};
}

void expect_close(const Grads& got, const Grads& want, double tol, const std::string& what) {
  EXPECT_LE(scaled_error(got.out, want.out), tol) << what << " out";
  EXPECT_LE(scaled_error(got.dq, want.dq), tol) << what << " dq";
  EXPECT_LE(scaled_error(got.dk, want.dk), tol) << what << " dk";
  EXPECT_LE(scaled_error(got.dv, want.dv), tol) << what << " dv";
}

// GPT-2 small's attention (12 heads of 64, T = 256), causal and full, in
// f16 and bf16: cuDNN, the hand kernel (DDP_CUDNN_ATTENTION=0) and the CPU's
// reference path in f32 on the same rounded inputs agree pairwise, and the
// cuDNN run builds (then reuses) its graphs while the hand kernel's builds
// none.
TEST(AttentionCudnn, MatchesHandKernelAndCpuAtGpt2Size) {
  SKIP_WITHOUT_GPU();
  const bool cudnn = cudnn_attention_here();
  if (DDP_HAVE_CUDNN && !cudnn) GTEST_SKIP() << "cuDNN attention needs compute capability 8.0+";
  Generator gen(7);
  const int64_t B = 2, H = 12, T = 256, D = 64;
  auto draw = [&] { return randn({B, H, T, D}, {}, &gen); };
  Tensor q = draw(), k = draw(), v = draw(), dout = draw();
  for (DType dt : {DType::f16, DType::bf16})
    for (bool causal : {true, false}) {
      const std::string what = std::string(dtype_name(dt)) + (causal ? " causal" : " full");
      // Both GPU paths see the same rounded values; the CPU computes on them in f32.
      Tensor qr = q.to(dt).to(DType::f32), kr = k.to(dt).to(DType::f32),
             vr = v.to(dt).to(DType::f32), dr = dout.to(dt).to(DType::f32);
      const Grads cpu = run_attention(qr, kr, vr, dr, DType::f32, Device::cpu(), causal, true);
      const F::AttentionCacheStats before = F::attention_cache_stats(DeviceType::CUDA);
      const Grads fused = run_attention(qr, kr, vr, dr, dt, Device::cuda(0), causal);
      const F::AttentionCacheStats after = F::attention_cache_stats(DeviceType::CUDA);
      Grads hand;
      {
        CudnnAttentionSetting off(false);
        hand = run_attention(qr, kr, vr, dr, dt, Device::cuda(0), causal);
      }
      const F::AttentionCacheStats after_hand = F::attention_cache_stats(DeviceType::CUDA);
      if (cudnn) {
        // A forward and a backward graph: built now, or found from an earlier case.
        EXPECT_EQ(after.hits + after.misses - before.hits - before.misses, 2) << what;
        EXPECT_GE(after.entries, 2) << what;
      } else {
        EXPECT_EQ(after.entries, 0) << what << ": graphs built in a build without cuDNN";
      }
      EXPECT_EQ(after_hand.hits + after_hand.misses, after.hits + after.misses)
          << what << ": DDP_CUDNN_ATTENTION=0 still used cuDNN";
      // Scaled bounds as attention_large_gpu_test.cpp's: both fused paths keep
      // scores in f32, but cuDNN's tensor-core GEMMs take P and dS rounded to
      // the dtype (bf16: 8 mantissa bits), and dk, dv sum 256 such terms. A
      // wrong mask, scale or layout is off by O(1).
      const double tol = dt == DType::f16 ? 1e-2 : 4e-2;
      expect_close(fused, cpu, tol, what + " cuDNN vs CPU");
      expect_close(hand, cpu, tol, what + " hand kernel vs CPU");
      expect_close(fused, hand, tol, what + " cuDNN vs hand kernel");
    }
  // The same case again reuses its graph.
  const F::AttentionCacheStats before = F::attention_cache_stats(DeviceType::CUDA);
  run_attention(q, k, v, dout, DType::bf16, Device::cuda(0), true);
  const F::AttentionCacheStats after = F::attention_cache_stats(DeviceType::CUDA);
  if (cudnn) {
    EXPECT_EQ(after.hits - before.hits, 2);
    EXPECT_EQ(after.misses, before.misses);
    EXPECT_EQ(after.entries, before.entries);
  }
}

// The f32 [B, H, T] log-sum-exp each fused forward writes, through the
// kernel registry (cuDNN's stats with DDP_CUDNN_ATTENTION on, the hand
// kernel's off), against log Σ_j exp(q_i·k_j·scale) over the visible keys in
// f64 on the host: both must be this natural-log quantity for a forward of one
// path to pair with a backward of the other.
TEST(AttentionCudnn, SavedLogSumExpIsNaturalLogOfScaledScores) {
  SKIP_WITHOUT_GPU();
  Generator gen(11);
  const int64_t B = 1, H = 2, T = 70, D = 64;
  const float scale = 0.125f;
  const Device dev = Device::cuda(0);
  Tensor q = randn({B, H, T, D}, {}, &gen).to(DType::f16);
  Tensor k = randn({B, H, T, D}, {}, &gen).to(DType::f16);
  Tensor v = randn({B, H, T, D}, {}, &gen).to(DType::f16);
  const auto qh = q.to(DType::f64).to_vector<double>(), kh = k.to(DType::f64).to_vector<double>();
  for (bool causal : {true, false})
    for (bool cudnn : {true, false}) {
      CudnnAttentionSetting setting(cudnn);
      Tensor out = Tensor::empty(q.shape(), TensorOptions(DType::f16).device(dev));
      Tensor lse = Tensor::empty({B, H, T}, TensorOptions(DType::f32).device(dev));
      kernels::call<kernels::attention_forward>(dev, q.to(dev), k.to(dev), v.to(dev), out, lse,
                                                scale, causal);
      const auto got = lse.cpu().to(DType::f64).to_vector<double>();
      double worst = 0;
      for (int64_t bh = 0; bh < B * H; ++bh)
        for (int64_t i = 0; i < T; ++i) {
          const int64_t keys = causal ? i + 1 : T;
          double m = -INFINITY;
          std::vector<double> s(size_t(keys), 0.0);
          for (int64_t j = 0; j < keys; ++j) {
            for (int64_t d = 0; d < D; ++d)
              s[size_t(j)] += qh[size_t((bh * T + i) * D + d)] * kh[size_t((bh * T + j) * D + d)];
            s[size_t(j)] *= scale;
            m = std::max(m, s[size_t(j)]);
          }
          double sum = 0;
          for (double x : s) sum += std::exp(x - m);
          worst = std::max(worst, std::abs(got[size_t(bh * T + i)] - (m + std::log(sum))));
        }
      EXPECT_LE(worst, 1e-3) << (cudnn ? "cuDNN" : "hand kernel")
                             << (causal ? " causal" : " full") << " lse";
    }
}

// Head sizes: 40 (a multiple of 8 only cuDNN takes) is fused exactly when
// cuDNN attention is here, else it takes the reference path; 33 (odd) and f32
// at 40 never reach cuDNN. Each matches the CPU. A fused call at 40 looks its
// graphs up four times: attention_supports asks for the forward and the
// backward graph (a fused forward needs a fused backward, and the hand kernel
// lacks 40), then each pass for its own.
TEST(AttentionCudnn, HeadSizesCudnnRefusesFallBack) {
  SKIP_WITHOUT_GPU();
  const bool cudnn = cudnn_attention_here();
  Generator gen(5);
  struct HeadCase {
    int64_t D;
    DType dtype;
    bool builds;  // whether the call may build or use a cuDNN graph
    double tol;
  };
  for (const HeadCase& c : {HeadCase{40, DType::f16, cudnn, 1e-2},
                            HeadCase{40, DType::bf16, cudnn, 4e-2},
                            HeadCase{33, DType::f16, false, 5e-3},
                            HeadCase{40, DType::f32, false, 1e-5}}) {
    const std::string what = std::string(dtype_name(c.dtype)) + " D=" + std::to_string(c.D);
    auto draw = [&] { return randn({1, 3, 45, c.D}, {}, &gen).to(c.dtype).to(DType::f32); };
    Tensor q = draw(), k = draw(), v = draw(), dout = draw();
    const Grads cpu = run_attention(q, k, v, dout, DType::f32, Device::cpu(), true, true);
    const F::AttentionCacheStats before = F::attention_cache_stats(DeviceType::CUDA);
    const Grads gpu = run_attention(q, k, v, dout, c.dtype, Device::cuda(0), true);
    const F::AttentionCacheStats after = F::attention_cache_stats(DeviceType::CUDA);
    EXPECT_EQ(after.hits + after.misses - before.hits - before.misses, c.builds ? 4 : 0) << what;
    expect_close(gpu, cpu, c.tol, what);
  }
  // Without cuDNN nothing takes f16 at D = 40: the hand kernel does not.
  if (!DDP_HAVE_CUDNN) {
    EXPECT_FALSE(cudnn);
  }
  EXPECT_FALSE(fused_here(DType::f16, 33));
  EXPECT_FALSE(fused_here(DType::f64, 64));
}

// Runs call and expects an E naming the op and containing phrase.
template <class E, class Call>
void expect_refused(Call&& call, const std::string& what, const char* phrase) {
  try {
    call();
    ADD_FAILURE() << what << ": not refused";
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("scaled_dot_product_attention: "), std::string::npos) << what << ": " << msg;
    EXPECT_NE(msg.find(phrase), std::string::npos) << what << ": " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": the wrong error: " << e.what();
  }
}

// Bad inputs on the GPU, in the dtypes cuDNN serves, are refused by the op
// (naming it) before any kernel runs.
TEST(AttentionCudnn, RefusesBadInputsNamingTheOp) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  auto t = [&](int64_t len, int64_t d, DType dt, Device dev) {
    return Tensor::zeros({2, 12, len, d}, TensorOptions(dt).device(dev));
  };
  using F::scaled_dot_product_attention;
  expect_refused<DTypeError>(
      [&] {
        scaled_dot_product_attention(t(8, 64, DType::f16, gpu), t(8, 64, DType::bf16, gpu),
                                     t(8, 64, DType::bf16, gpu), true);
      },
      "f16 q, bf16 k and v", "inputs must share one floating dtype");
  expect_refused<DTypeError>(
      [&] {
        Tensor x = t(8, 64, DType::i64, gpu);
        scaled_dot_product_attention(x, x, x, true);
      },
      "i64 inputs", "inputs must share one floating dtype");
  expect_refused<ShapeError>(
      [&] {
        scaled_dot_product_attention(t(8, 64, DType::bf16, gpu), t(8, 32, DType::bf16, gpu),
                                     t(8, 32, DType::bf16, gpu));
      },
      "head sizes 64 and 32", "must agree in batch, heads and head size");
  expect_refused<ShapeError>(
      [&] {
        scaled_dot_product_attention(t(8, 64, DType::f16, gpu), t(6, 64, DType::f16, gpu),
                                     t(6, 64, DType::f16, gpu), true);
      },
      "causal, 8 queries and 6 keys", "a causal mask needs as many keys as queries");
  expect_refused<ShapeError>(
      [&] {
        Tensor x = Tensor::zeros({2, 8, 64}, TensorOptions(DType::f16).device(gpu));
        scaled_dot_product_attention(x, x, x, true);
      },
      "3-D inputs", "inputs must be [B, H, T, D]");
  expect_refused<DeviceError>(
      [&] {
        scaled_dot_product_attention(t(8, 64, DType::f16, gpu), t(8, 64, DType::f16, Device::cpu()),
                                     t(8, 64, DType::f16, gpu));
      },
      "k on the CPU", "inputs on different devices");
}

}  // namespace

// ---- strided q/k/v (Note [Strided attention operands]) ----------------------------

namespace sa = ddp::test::strided_attention;

// The fused kernels read GPT's qkv views, transposed heads and (after one
// copy) a last dim that is not dense, and give what they give on contiguous
// copies: bit for bit where the arithmetic cannot depend on the layout (the
// hand kernel: f32, and f16/bf16 with cuDNN off), within one or two units in
// the last place where cuDNN runs (its engine may differ per layout, and its
// dq sums with atomics).
TEST(AttentionGpu, StridedOperandsMatchTheCopyingPath) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  for (bool causal : {true, false})
    for (int64_t D : {16, 64}) {
      sa::check_layouts(2, 3, 77, D, DType::f32, gpu, causal, 0.0);
      {
        CudnnAttentionSetting off(false);
        sa::check_layouts(2, 3, 77, D, DType::bf16, gpu, causal, 0.0);
      }
      sa::check_layouts(2, 3, 77, D, DType::f16, gpu, causal, 2e-3);
      sa::check_layouts(2, 3, 77, D, DType::bf16, gpu, causal, 1.6e-2);
    }
  // A head size only cuDNN takes, where it does.
  if (cudnn_attention_here()) sa::check_layouts(1, 4, 50, 40, DType::f16, gpu, true, 2e-3);
}

// GPT's block hands its q/k/v views to the fused kernels as they are and gets
// its output back in [B, T, H, D] order: no operand copy, forward or backward,
// on either fused path; a last dim that is not dense is copied once per operand.
TEST(AttentionGpu, GptViewsMakeNoOperandCopy) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  for (DType dt : {DType::f32, DType::bf16}) {
    const sa::BlockRun r = sa::run_gpt_block(dt, gpu);
    EXPECT_EQ(r.copies, 0) << dtype_name(dt);
    EXPECT_TRUE(r.output_heads_last) << dtype_name(dt);
  }
  Generator gen(1);
  Tensor q = randn({1, 2, 16, 32}, {}, &gen).to(gpu);
  const int64_t before = F::attention_operand_copies();
  sa::run(q, q, q, q, sa::Layout::strided_dim, true);
  EXPECT_EQ(F::attention_operand_copies() - before, 3);  // q, k, v; dout has out's layout
}

// The cuDNN graphs take the operands' strides, so a new layout is a new graph
// (a forward and a backward), and the same layout again reuses it.
TEST(AttentionCudnn, GraphsAreKeyedByStrides) {
  SKIP_WITHOUT_GPU();
  if (!cudnn_attention_here()) GTEST_SKIP() << "no cuDNN attention here";
  const Device gpu = Device::cuda(0);
  Generator gen(2);
  auto draw = [&] { return randn({2, 4, 40, 64}, {}, &gen).to(gpu).to(DType::f16); };
  Tensor q = draw(), k = draw(), v = draw(), dout = draw();
  sa::run(q, k, v, dout, sa::Layout::contiguous, true);
  const F::AttentionCacheStats before = F::attention_cache_stats(DeviceType::CUDA);
  sa::run(q, k, v, dout, sa::Layout::qkv_view, true);
  const F::AttentionCacheStats mid = F::attention_cache_stats(DeviceType::CUDA);
  EXPECT_EQ(mid.entries - before.entries, 2);
  sa::run(q, k, v, dout, sa::Layout::qkv_view, true);
  const F::AttentionCacheStats after = F::attention_cache_stats(DeviceType::CUDA);
  EXPECT_EQ(after.hits - mid.hits, 2);
  EXPECT_EQ(after.entries, mid.entries);
}

// The kernels' contract checked where a caller could break it: a direct
// kernel call with a last dim that is not dense raises ShapeError (the hand
// kernel), as does one whose layout is not the cuDNN graph's (v with other
// strides than k).
TEST(AttentionGpu, DirectKernelCallsCheckTheOperandLayout) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  auto opts = [&](DType dt) { return TensorOptions(dt).device(gpu); };
  Tensor wide = Tensor::zeros({1, 2, 16, 64}, opts(DType::f32));
  Tensor q = wide.slice(3, 0, 64, 2);  // [1, 2, 16, 32], last stride 2
  Tensor out = Tensor::empty({1, 2, 16, 32}, opts(DType::f32));
  Tensor lse = Tensor::empty({1, 2, 16}, opts(DType::f32));
  EXPECT_THROW(kernels::call<kernels::attention_forward>(gpu, q, q, q, out, lse, 0.125f, true),
               ShapeError);
  if (!cudnn_attention_here()) return;
  Tensor h = Tensor::zeros({1, 2, 16, 40}, opts(DType::f16));
  Tensor v = Tensor::zeros({1, 16, 2, 40}, opts(DType::f16)).transpose(1, 2);
  Tensor ho = Tensor::empty({1, 2, 16, 40}, opts(DType::f16));
  EXPECT_THROW(kernels::call<kernels::attention_forward>(gpu, h, h, v, ho, lse, 0.125f, true),
               ShapeError);
}
