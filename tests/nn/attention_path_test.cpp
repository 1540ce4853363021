// The CUDA attention's path decision (kernels/cuda/attention_path.h,
// Note [Attention paths on CUDA] in attention_cuda.cpp) on the CPU: which of
// cuDNN, the hand kernel and the reference path each (dtype, head size,
// compute capability, settings, cuDNN verdict) takes, which verdicts it asks
// for, that a refused graph (cached) falls back instead of raising, and that
// a fused forward is never paired with a backward that has no fused path.
// White-box: no GPU, no cuDNN; the verdicts are supplied by hand.

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "cuda/attention_path.h"

namespace ddp::test {
namespace {

namespace ap = nn::functional::attention_path;
using ap::Pass;
using ap::Path;
using ap::Verdict;

// A GPT-like bf16 self-attention on `sm`, libddp built with cuDNN and the
// cuDNN path on.
ap::Problem problem(int64_t D, int sm = 90, DType dtype = DType::bf16) {
  ap::Problem p;
  p.B = 2;
  p.H = 4;
  p.T = p.S = 128;
  p.D = D;
  p.dtype = dtype;
  p.scale = 0.125f;
  p.causal = true;
  p.sm = sm;
  p.cudnn_built = true;
  p.cudnn_enabled = true;
  return p;
}

// Canned verdicts per pass, counting what is asked.
struct Verdicts {
  Verdict forward = Verdict::built, backward = Verdict::built;
  std::vector<Pass> asked;
  Verdict operator()(Pass pass) {
    asked.push_back(pass);
    return pass == Pass::forward ? forward : backward;
  }
};

const std::vector<Pass> kNone{}, kForward{Pass::forward}, kBackward{Pass::backward},
    kBoth{Pass::forward, Pass::backward};

TEST(AttentionPath, HandKernelCasesAreStaticAndF32NeverReachesCudnn) {
  static_assert(cuda_kernels::flash_attention_supports(DType::f32, 128));
  static_assert(!cuda_kernels::flash_attention_supports(DType::f64, 64));
  static_assert(!cuda_kernels::flash_attention_supports(DType::bf16, 256));
  for (int64_t D : {16, 32, 64, 128}) {
    Verdicts v;
    const ap::Problem p = problem(D, 90, DType::f32);
    EXPECT_FALSE(ap::cudnn_may_take(p, Pass::forward)) << D;
    EXPECT_TRUE(ap::fused_takes(p, true, v)) << D;
    EXPECT_EQ(ap::choose(p, Pass::forward, v), Path::hand_kernel) << D;
    EXPECT_EQ(ap::choose(p, Pass::backward, v), Path::hand_kernel) << D;
    EXPECT_EQ(v.asked, kNone) << D;
  }
  // f32 at 40, f64 anywhere, odd heads: the reference path, cuDNN not asked.
  for (const ap::Problem& p :
       {problem(40, 90, DType::f32), problem(64, 90, DType::f64), problem(33, 90, DType::f16),
        problem(36, 90, DType::bf16)}) {
    Verdicts v;
    EXPECT_FALSE(ap::fused_takes(p, true, v)) << p.D;
    EXPECT_FALSE(ap::fused_takes(p, false, v)) << p.D;
    EXPECT_EQ(v.asked, kNone) << p.D;
  }
}

TEST(AttentionPath, CudnnTakesHalfPrecisionFromAmpereOn) {
  for (DType dt : {DType::f16, DType::bf16})
    for (int sm : {80, 86, 89, 90, 100, 120}) {
      Verdicts v;
      const ap::Problem p = problem(64, sm, dt);
      // Head 64: the hand kernel stands in, so the decision asks nothing...
      EXPECT_TRUE(ap::fused_takes(p, true, v)) << sm;
      EXPECT_EQ(v.asked, kNone) << sm;
      // ...and each pass asks for its own graph.
      EXPECT_EQ(ap::choose(p, Pass::forward, v), Path::cudnn) << sm;
      EXPECT_EQ(ap::choose(p, Pass::backward, v), Path::cudnn) << sm;
      EXPECT_EQ(v.asked, kBoth) << sm;
    }
  // Before Ampere: the hand kernel or the reference, cuDNN never asked.
  Verdicts v;
  EXPECT_EQ(ap::choose(problem(64, 75, DType::f16), Pass::forward, v), Path::hand_kernel);
  EXPECT_FALSE(ap::fused_takes(problem(40, 75, DType::f16), true, v));
  EXPECT_FALSE(ap::fused_takes(problem(256, 75, DType::bf16), false, v));
  EXPECT_EQ(v.asked, kNone);
}

// Fix: cuDNN's support checks (frontend 1.x, cuDNN 9) for f16/bf16: a
// multiple of 8 up to 256 forward from sm80; backward up to 256 on sm9x,
// up to 128 on sm8x and sm12x, 128 or exactly 256 on sm10x; never
// s_q = s_kv = 1 backward.
TEST(AttentionPath, HeadSizeBoundsFollowTheFrontendSupportChecks) {
  for (int64_t D = 8; D <= 256; D += 8) {
    EXPECT_TRUE(ap::cudnn_may_take(problem(D, 80), Pass::forward)) << D;
    EXPECT_TRUE(ap::cudnn_may_take(problem(D, 90), Pass::forward)) << D;
    EXPECT_TRUE(ap::cudnn_may_take(problem(D, 90), Pass::backward)) << D;
    EXPECT_EQ(ap::cudnn_may_take(problem(D, 80), Pass::backward), D <= 128) << D;
    EXPECT_EQ(ap::cudnn_may_take(problem(D, 86), Pass::backward), D <= 128) << D;
    EXPECT_EQ(ap::cudnn_may_take(problem(D, 89), Pass::backward), D <= 128) << D;
    EXPECT_EQ(ap::cudnn_may_take(problem(D, 120), Pass::backward), D <= 128) << D;
    EXPECT_EQ(ap::cudnn_may_take(problem(D, 100), Pass::backward), D <= 128 || D == 256) << D;
  }
  for (int64_t D : {0, 4, 12, 36, 100, 260, 264, 512})
    for (Pass pass : {Pass::forward, Pass::backward})
      EXPECT_FALSE(ap::cudnn_may_take(problem(D, 90), pass)) << D;
  ap::Problem one = problem(64);
  one.T = one.S = 1;
  EXPECT_TRUE(ap::cudnn_may_take(one, Pass::forward));
  EXPECT_FALSE(ap::cudnn_may_take(one, Pass::backward));
  one.S = 2;
  EXPECT_TRUE(ap::cudnn_may_take(one, Pass::backward));
  EXPECT_FALSE(ap::cudnn_may_take(problem(64, 90, DType::f32), Pass::forward));
  ap::Problem without = problem(64);
  without.cudnn_built = false;
  EXPECT_FALSE(ap::cudnn_may_take(without, Pass::forward));
}

// Fix: head size 256 in bf16 goes to cuDNN on Hopper for training and on
// Ampere for a forward-only call, not to the O(T·S) reference; a training
// call on Ampere (no cuDNN backward above 128, no hand kernel at 256) takes
// the reference for both passes.
TEST(AttentionPath, HeadSize256TrainsOnCudnnOnHopper) {
  {
    Verdicts v;
    const ap::Problem p = problem(256, 90);
    EXPECT_TRUE(ap::fused_takes(p, true, v));
    EXPECT_EQ(v.asked, kBoth);
    EXPECT_EQ(ap::choose(p, Pass::forward, v), Path::cudnn);
    EXPECT_EQ(ap::choose(p, Pass::backward, v), Path::cudnn);
  }
  for (int sm : {80, 86, 89}) {
    Verdicts v;
    const ap::Problem p = problem(256, sm);
    EXPECT_FALSE(ap::fused_takes(p, true, v)) << sm;
    EXPECT_EQ(v.asked, kForward) << sm << ": the backward is known refused without a build";
    v.asked.clear();
    EXPECT_TRUE(ap::fused_takes(p, false, v)) << sm;
    EXPECT_EQ(ap::choose(p, Pass::forward, v), Path::cudnn) << sm;
  }
  // Other head sizes only cuDNN takes, on Hopper.
  for (int64_t D : {8, 40, 96, 160, 192, 248}) {
    Verdicts v;
    EXPECT_TRUE(ap::fused_takes(problem(D, 90), true, v)) << D;
    EXPECT_EQ(v.asked, kBoth) << D;
  }
}

// Fix: a head size cuDNN refuses (at validation, in the heuristics, in the
// support check) and the hand kernel lacks takes the reference path —
// decided before the forward, for both passes — instead of raising.
TEST(AttentionPath, RefusedHeadSizeTheHandKernelLacksTakesTheReference) {
  for (int64_t D : {40, 256}) {
    Verdicts fwd_refused;
    fwd_refused.forward = Verdict::refused;
    const ap::Problem p = problem(D, 90);
    EXPECT_FALSE(ap::fused_takes(p, true, fwd_refused)) << D;
    EXPECT_EQ(fwd_refused.asked, kForward) << D << ": no backward graph after a refused forward";
    EXPECT_FALSE(ap::fused_takes(p, false, fwd_refused)) << D;
    EXPECT_EQ(ap::choose(p, Pass::forward, fwd_refused), Path::reference) << D;

    // Forward built, backward refused: a forward-only call stays fused, a
    // training call takes the reference for both passes.
    Verdicts bwd_refused;
    bwd_refused.backward = Verdict::refused;
    EXPECT_FALSE(ap::fused_takes(p, true, bwd_refused)) << D;
    EXPECT_EQ(bwd_refused.asked, kBoth) << D;
    EXPECT_TRUE(ap::fused_takes(p, false, bwd_refused)) << D;
    EXPECT_EQ(ap::choose(p, Pass::backward, bwd_refused), Path::reference) << D;
  }
}

// Fix: a refused graph — e.g. no deterministic engine under
// DDP_CUDNN_DETERMINISTIC=1 — falls back to the hand kernel where it takes
// the head size, whichever pass cuDNN refused.
TEST(AttentionPath, RefusedGraphFallsBackToTheHandKernel) {
  for (int64_t D : {16, 32, 64, 128}) {
    ap::Problem p = problem(D, 90);
    p.deterministic = true;
    for (Verdict fwd : {Verdict::built, Verdict::refused})
      for (Verdict bwd : {Verdict::built, Verdict::refused}) {
        Verdicts v;
        v.forward = fwd;
        v.backward = bwd;
        EXPECT_TRUE(ap::fused_takes(p, true, v)) << D;
        EXPECT_EQ(ap::choose(p, Pass::forward, v),
                  fwd == Verdict::built ? Path::cudnn : Path::hand_kernel)
            << D;
        EXPECT_EQ(ap::choose(p, Pass::backward, v),
                  bwd == Verdict::built ? Path::cudnn : Path::hand_kernel)
            << D;
      }
  }
}

TEST(AttentionPath, CudnnSwitchedOff) {
  {
    // Head 64: the hand kernel for both passes, cuDNN not asked.
    Verdicts v;
    ap::Problem p = problem(64);
    p.cudnn_enabled = false;
    EXPECT_TRUE(ap::fused_takes(p, true, v));
    EXPECT_EQ(ap::choose(p, Pass::forward, v), Path::hand_kernel);
    EXPECT_EQ(ap::choose(p, Pass::backward, v), Path::hand_kernel);
    EXPECT_EQ(v.asked, kNone);
  }
  {
    // Head 40: the reference; but a backward reached with the switch turned
    // off after a cuDNN forward still takes cuDNN (the only fused backward).
    Verdicts v;
    ap::Problem p = problem(40);
    p.cudnn_enabled = false;
    EXPECT_FALSE(ap::fused_takes(p, true, v));
    EXPECT_EQ(v.asked, kNone);
    EXPECT_EQ(ap::choose(p, Pass::backward, v), Path::cudnn);
    EXPECT_EQ(v.asked, kBackward);
  }
  {
    // A build without cuDNN: never asked, whatever the switch says.
    Verdicts v;
    ap::Problem p = problem(40);
    p.cudnn_built = false;
    EXPECT_FALSE(ap::fused_takes(p, true, v));
    p.D = 64;
    EXPECT_EQ(ap::choose(p, Pass::forward, v), Path::hand_kernel);
    EXPECT_EQ(ap::choose(p, Pass::backward, v), Path::hand_kernel);
    EXPECT_EQ(v.asked, kNone);
  }
}

// The invariant that lets the log-sum-exp be shared: whenever the decision
// takes the fused path for a training call, each pass has a fused path (cuDNN
// or the hand kernel, which read and write the same natural-log lse), also
// when DDP_CUDNN_ATTENTION is switched off between forward and backward; and
// a forward-only call's forward has one. Swept over dtypes, head sizes, GPUs,
// settings and every pair of verdicts.
TEST(AttentionPath, AFusedForwardAlwaysHasAFusedBackward) {
  int fused = 0, reference = 0;
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
    for (int64_t D : {8, 16, 24, 32, 33, 40, 64, 96, 128, 136, 192, 256, 264})
      for (int sm : {70, 75, 80, 86, 89, 90, 100, 103, 120})
        for (int flags = 0; flags < 8; ++flags)
          for (Verdict fwd : {Verdict::built, Verdict::refused})
            for (Verdict bwd : {Verdict::built, Verdict::refused}) {
              ap::Problem p = problem(D, sm, dt);
              p.cudnn_built = flags & 1;
              p.cudnn_enabled = p.cudnn_built && (flags & 2);
              p.deterministic = flags & 4;
              const std::string what = std::string(dtype_name(dt)) + " D=" + std::to_string(D) +
                                       " sm" + std::to_string(sm) + " flags " +
                                       std::to_string(flags);
              Verdicts v;
              v.forward = fwd;
              v.backward = bwd;
              if (ap::fused_takes(p, false, v)) {
                EXPECT_NE(ap::choose(p, Pass::forward, v), Path::reference) << what;
              }
              if (!ap::fused_takes(p, true, v)) {
                ++reference;
                continue;
              }
              ++fused;
              EXPECT_NE(ap::choose(p, Pass::forward, v), Path::reference) << what;
              EXPECT_NE(ap::choose(p, Pass::backward, v), Path::reference) << what;
              ap::Problem off = p;
              off.cudnn_enabled = false;
              EXPECT_NE(ap::choose(off, Pass::backward, v), Path::reference) << what << " off";
            }
  EXPECT_GT(fused, 0);
  EXPECT_GT(reference, 0);
}

// The graph cache's keys: one graph per pass and per everything that shapes
// it; the deterministic flag shapes the backward graph only.
TEST(AttentionPath, KeysSeparateWhatShapesTheGraph) {
  const ap::Problem p = problem(64);
  std::set<std::string> keys;
  auto add = [&](const ap::Problem& q, Pass pass) { return keys.insert(q.key(pass)).second; };
  EXPECT_TRUE(add(p, Pass::forward));
  EXPECT_TRUE(add(p, Pass::backward));
  EXPECT_FALSE(add(p, Pass::forward));
  ap::Problem q = p;
  q.causal = false;
  EXPECT_TRUE(add(q, Pass::forward));
  q = p;
  q.scale = 0.25f;
  EXPECT_TRUE(add(q, Pass::forward));
  q = p;
  q.dtype = DType::f16;
  EXPECT_TRUE(add(q, Pass::forward));
  q = p;
  q.device = 1;
  EXPECT_TRUE(add(q, Pass::forward));
  q = p;
  q.S = 64;
  q.causal = false;
  EXPECT_TRUE(add(q, Pass::forward));
  q = p;
  q.B = 12;  // "12,4" vs "1,24": separated fields
  q.H = 4;
  ap::Problem r = p;
  r.B = 1;
  r.H = 24;
  EXPECT_NE(q.key(Pass::forward), r.key(Pass::forward));
  q = p;
  q.deterministic = true;
  EXPECT_EQ(q.key(Pass::forward), p.key(Pass::forward));
  EXPECT_NE(q.key(Pass::backward), p.key(Pass::backward));
  q = p;
  q.cudnn_enabled = false;  // a per-call switch, not part of the graph
  EXPECT_EQ(q.key(Pass::forward), p.key(Pass::forward));
}

// Strided operands (Note [Strided attention operands]): the strides of q and
// k are part of the keys, and the outputs are dense in their input's dim
// order — [B, T, H, D] for GPT's views of its [B, T, 3C] projection.
TEST(AttentionPath, StridesShapeTheGraphAndTheOutputs) {
  ap::Problem p = problem(64);  // B 2, H 4, T 128, D 64: C 256
  const int64_t T = p.T, H = p.H, D = p.D, C = H * D;
  p.q_strides = p.k_strides = {H * T * D, T * D, D};  // contiguous
  ap::Problem g = p;
  g.q_strides = g.k_strides = {T * 3 * C, D, 3 * C};  // the qkv views
  EXPECT_NE(p.key(Pass::forward), g.key(Pass::forward));
  EXPECT_NE(p.key(Pass::backward), g.key(Pass::backward));
  ap::Problem kv = g;
  kv.k_strides = p.k_strides;
  EXPECT_NE(kv.key(Pass::forward), g.key(Pass::forward));

  EXPECT_FALSE(ap::heads_inside_rows(p.q_strides, H, T));
  EXPECT_TRUE(ap::heads_inside_rows(g.q_strides, H, T));
  EXPECT_EQ(ap::packed_like(p.q_strides, H, T, D), (ap::Strides{H * T * D, T * D, D}));
  EXPECT_EQ(ap::packed_like(g.q_strides, H, T, D), (ap::Strides{T * C, D, C}));
  // One head or one row: nothing to reorder, packed [B, H, rows, D].
  EXPECT_EQ(ap::packed_like({T * 3 * D, D, 3 * D}, 1, T, D), (ap::Strides{T * D, T * D, D}));
  EXPECT_EQ(ap::packed_like({3 * C, D, 3 * C}, H, 1, D), (ap::Strides{H * D, D, D}));
}

// Fix: the heuristics' "no engine" reaches the caller as a CudnnError from
// cudnn_graph::build; refusal_of reads it as "not supported" (like build's
// own answer), so it is cached instead of thrown. Other errors propagate.
TEST(AttentionPath, RefusalOfReadsCudnnErrorsAsNotSupported) {
  using Answer = std::optional<std::string>;
  EXPECT_EQ(ap::refusal_of([] { return Answer(); }), std::nullopt);
  EXPECT_EQ(ap::refusal_of([] { return Answer("no engine"); }), Answer("no engine"));
  const Answer why = ap::refusal_of([]() -> Answer {
    DDP_THROW(CudnnError, "scaled_dot_product_attention: creating execution plans failed: "
                          "no valid engine configs");
  });
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("no valid engine configs"), std::string::npos) << *why;
  EXPECT_THROW(ap::refusal_of([]() -> Answer { DDP_THROW(CudaError, "out of memory"); }),
               CudaError);
  EXPECT_THROW(ap::refusal_of([]() -> Answer { DDP_THROW(ValueError, "bad"); }), ValueError);
}

// The whole flow on the CPU with a stand-in for the graph cache: under
// DDP_CUDNN_DETERMINISTIC=1 the backward graph's build throws (no
// deterministic engine). Training steps decide, run the forward and the
// backward: nothing raises, the refusal is built once and then found in the
// cache, and the passes fall back (head 64: the hand kernel's backward after
// cuDNN's forward; head 256: the reference for both).
TEST(AttentionPath, DeterministicRefusalIsCachedAndFallsBack) {
  struct Cache {
    std::map<std::string, Verdict> entries;
    int builds = 0, hits = 0;
  };
  for (int64_t D : {64, 256}) {
    Cache cache;
    ap::Problem p = problem(D, 90);
    p.deterministic = true;
    auto verdict = [&](Pass pass) {
      const std::string key = p.key(pass);
      if (auto it = cache.entries.find(key); it != cache.entries.end()) {
        ++cache.hits;
        return it->second;
      }
      ++cache.builds;
      const std::optional<std::string> why = ap::refusal_of([&]() -> std::optional<std::string> {
        if (pass == Pass::backward && p.deterministic)
          DDP_THROW(CudnnError, "creating execution plans failed: no deterministic engine");
        return std::nullopt;
      });
      return cache.entries[key] = why ? Verdict::refused : Verdict::built;
    };
    for (int step = 0; step < 2; ++step) {
      const std::string what = "D=" + std::to_string(D) + " step " + std::to_string(step);
      const int builds = cache.builds;
      if (D == 64) {
        ASSERT_TRUE(ap::fused_takes(p, true, verdict)) << what;
        EXPECT_EQ(ap::choose(p, Pass::forward, verdict), Path::cudnn) << what;
        EXPECT_EQ(ap::choose(p, Pass::backward, verdict), Path::hand_kernel) << what;
      } else {
        EXPECT_FALSE(ap::fused_takes(p, true, verdict)) << what;  // the reference path
      }
      EXPECT_EQ(cache.builds - builds, step == 0 ? 2 : 0) << what;
    }
    EXPECT_EQ(cache.entries.size(), 2u);
    EXPECT_GT(cache.hits, 0);
  }
}

}  // namespace
}  // namespace ddp::test
