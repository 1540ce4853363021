#pragma once
// Internal: which path the CUDA attention takes for one call (Note [Attention
// paths on CUDA] in attention_cuda.cpp), as pure functions of the problem,
// the GPU's compute capability, the settings and cuDNN's verdicts on its
// graphs. Nothing here touches CUDA or cuDNN: attention_cuda.cpp supplies the
// verdicts from its graph cache (building a graph the first time one is
// asked for), the CPU unit test tests/nn/attention_path_test.cpp supplies
// them by hand and walks every branch.

#include <bit>
#include <cstdint>
#include <optional>
#include <string>

#include "cuda/flash_attention.h"  // flash_attention_supports: the hand kernel's cases
#include "ddp/core/dtype.h"
#include "ddp/core/error.h"
#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional::attention_path {

enum class Path { cudnn, hand_kernel, reference };
enum class Pass { forward, backward };

inline const char* path_name(Path p) {
  switch (p) {
    case Path::cudnn: return "cuDNN";
    case Path::hand_kernel: return "hand kernel";
    case Path::reference: return "reference";
  }
  return "?";
}

inline const char* pass_name(Pass p) { return p == Pass::forward ? "forward" : "backward"; }

// cuDNN's answer for the graph of one pass, cached with the graph: built, or
// refused (validation outside the support surface, no engine from the
// heuristics, every candidate failing its support check or plan build).
enum class Verdict { built, refused };

// Element strides (batch, head, row) of a [B, H, rows, D] operand whose last
// dim is dense: every operand of the fused kernels (Note [Strided attention
// operands] in attention.cpp).
struct Strides {
  int64_t b = 0, h = 0, r = 0;
  bool operator==(const Strides&) const = default;
};

inline Strides strides_of(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

// Whether an operand with strides `s` keeps each row's heads side by side
// ([B, rows, H, D] order in memory, as GPT's q/k/v views of the fused qkv
// projection do) rather than each head's rows ([B, H, rows, D]).
inline bool heads_inside_rows(const Strides& s, int64_t heads, int64_t rows) {
  return heads > 1 && rows > 1 && s.h < s.r;
}

// The dense layout the fused path gives a [B, heads, rows, D] output (out,
// dq, dk, dv) of an operand with strides `like`: its dim order, packed. So
// an output in [B, T, H, D] order is one transpose away from [B, T, C].
inline Strides packed_like(const Strides& like, int64_t heads, int64_t rows, int64_t D) {
  if (heads_inside_rows(like, heads, rows)) return {rows * heads * D, D, heads * D};
  return {heads * rows * D, rows * D, D};
}

// One call of the fused attention and the settings that shape its path.
struct Problem {
  int64_t B = 0, H = 0, T = 0, S = 0, D = 0;  // q [B, H, T, D], k and v [B, H, S, D]
  // q's strides and k's, which v shares; out, dO and dQ are packed_like(q),
  // dK and dV packed_like(k) (Note [Strided attention operands]).
  Strides q_strides{}, k_strides{};
  DType dtype = DType::f32;
  float scale = 1.0f;
  bool causal = false;
  int device = 0;
  int sm = 0;                  // compute capability, 10·major + minor (80, 86, 90, 100, ...)
  bool deterministic = false;  // DDP_CUDNN_DETERMINISTIC
  bool cudnn_built = false;    // libddp built with cuDNN (DDP_HAVE_CUDNN)
  bool cudnn_enabled = false;  // DDP_CUDNN_ATTENTION (default on)

  // The graph cache's key for this pass: everything that shapes its graph,
  // the operands' strides included. The forward graph does not depend on the
  // deterministic flag, the backward graph does (set_deterministic_algorithm).
  std::string key(Pass pass) const {
    std::string key = pass_name(pass);
    key += '|';
    for (int64_t v : {B, H, T, S, D, int64_t(dtype), int64_t(std::bit_cast<uint32_t>(scale)),
                      int64_t(causal), int64_t(pass == Pass::backward && deterministic),
                      int64_t(device), q_strides.b, q_strides.h, q_strides.r, k_strides.b,
                      k_strides.h, k_strides.r}) {
      key += std::to_string(v);
      key += ',';
    }
    return key;
  }
};

// Whether the hand kernel (Note [Flash attention kernels]) takes the case:
// f32/f16/bf16 with head size 16, 32, 64 or 128, both passes.
inline bool hand_kernel_takes(const Problem& p) {
  return cuda_kernels::flash_attention_supports(p.dtype, p.D);
}

// Whether cuDNN's fused attention may take this pass, from what is known
// before a graph is built: the static part of the cuDNN frontend's SDPA
// support checks (cudnn_frontend/node/sdpa_support_surface.h for the
// forward, CompositeSDPABackwardNode's for the backward) for f16/bf16 I/O
// with cuDNN 9:
//   - compute capability 8.0 or newer; head size a multiple of 8;
//   - forward: head size up to 256 (on sm8x cuDNN 9.9 and older stop at 128,
//     on sm10x 9.8 and older: version-dependent, left to validation);
//   - backward: up to 256 on sm9x, up to 128 on sm8x and sm12x; on sm10x up
//     to 128 or exactly 256 (cuDNN 9.23+, left to validation);
//   - backward: not one query against one key (s_q = s_kv = 1).
// What this lets through may still be refused when the graph is built; that
// verdict is cached per graph key.
inline bool cudnn_may_take(const Problem& p, Pass pass) {
  if (!p.cudnn_built || p.sm < 80) return false;
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) return false;
  if (p.D <= 0 || p.D % 8 != 0 || p.D > 256) return false;
  if (pass == Pass::forward) return true;
  if (p.T == 1 && p.S == 1) return false;
  if (p.D <= 128) return true;
  const int major = p.sm / 10;
  return major == 9 || (major == 10 && p.D == 256);
}

// The path of one pass. `verdict(pass)` returns cuDNN's cached Verdict for
// the pass's graph (building it on first ask); it is asked only when cuDNN
// may take the pass and is wanted. DDP_CUDNN_ATTENTION=0 keeps the forward
// off cuDNN; the backward ignores it when the hand kernel lacks the head size
// (its forward can only have run on cuDNN then). A refused graph falls to the
// hand kernel when that takes the case, else to the reference path: the
// caller's job (fused_takes) is to never reach a fused pass that answers
// reference.
template <class VerdictOf>
Path choose(const Problem& p, Pass pass, VerdictOf&& verdict) {
  const bool hand = hand_kernel_takes(p);
  const bool wanted =
      cudnn_may_take(p, pass) && (p.cudnn_enabled || (pass == Pass::backward && !hand));
  if (wanted && verdict(pass) == Verdict::built) return Path::cudnn;
  return hand ? Path::hand_kernel : Path::reference;
}

// Whether the fused attention takes the call (attention_supports), decided
// once for both passes before the forward runs: a fused forward must be
// followed by a fused backward, since the backward kernel cannot switch to
// the reference path (that needs the forward's autograd graph). The hand
// kernel stands in for either pass that cuDNN refuses, so a head size it
// takes needs no verdict here; any other head size needs cuDNN's forward
// graph and, when a backward will follow, its backward graph too (e.g. head
// size 256 on sm8x: a forward-only call runs on cuDNN, a training call on the
// reference path).
template <class VerdictOf>
bool fused_takes(const Problem& p, bool needs_backward, VerdictOf&& verdict) {
  if (hand_kernel_takes(p)) return true;
  if (choose(p, Pass::forward, verdict) != Path::cudnn) return false;
  return !needs_backward || choose(p, Pass::backward, verdict) == Path::cudnn;
}

// Runs `build` (returning cuDNN's "not supported" message, or nullopt when
// the graph was built) and also reads a CudnnError it raises as "not
// supported": the heuristics having no engine for the graph (e.g. none
// deterministic under DDP_CUDNN_DETERMINISTIC=1) is an answer to cache and
// fall back from, as for the convolution and batch-norm graphs. Other errors
// (CUDA failures, out of memory) propagate.
template <class Build>
std::optional<std::string> refusal_of(Build&& build) {
  try {
    return build();
  } catch (const CudnnError& e) {
    return std::string(e.what());
  }
}

}  // namespace ddp::nn::functional::attention_path
