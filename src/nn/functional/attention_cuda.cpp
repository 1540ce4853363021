// The CUDA registration of the fused attention kernels (attention_supports,
// attention_forward, attention_backward, attention_cache_stats): cuDNN's
// fused scaled-dot-product attention for f16/bf16, the hand kernel of
// kernels/cuda/attention.cu for f32 and for whatever cuDNN refuses.
//
// Note [Attention paths on CUDA]
// There is one registration per (op, device), so this file owns CUDA's and
// picks a path per call:
//   1. cuDNN (builds with cuDNN, DDP_CUDNN_ATTENTION not 0): f16/bf16, head
//      size a multiple of 8 up to 128, a GPU of compute capability 8.0 or
//      newer. cuDNN's flash-attention engines run on tensor cores; they
//      compute in f32 and take no f32 inputs (the hand kernel keeps f32 exact
//      to ~1e-5 of the reference, which cuDNN's f32 path would not promise).
//      The head-size bound is the one every cuDNN 9 engine on Ampere and
//      Hopper takes for both passes; larger heads would need a
//      version-dependent check, and GPT-style models use 64 or 128.
//   2. the hand kernel (Note [Flash attention kernels]): f32/f16/bf16 with
//      head size 16, 32, 64 or 128 — the f32 path, and the f16/bf16 path when
//      cuDNN is off, absent or refuses the shape.
// attention_supports says yes when either path takes (dtype, head size) on
// the device; anything else goes to the reference path (Note [Attention
// reference path]), e.g. head size 24 or 36, f64, or f16 with head size 40
// on a GPU older than Ampere.
//
// Graphs: one forward graph (Q, K, V -> O and Stats) and one backward graph
// (Q, K, V, O, dO, Stats -> dQ, dK, dV) per (B, H, T, S, D, dtype, causal,
// scale, deterministic, device), built once and cached (Note [cuDNN graph
// API]). A refusal (no engine for this shape on this GPU, from validation or
// from the support check) is cached too, so it is asked once: the call then
// takes the hand kernel when that covers the head size and raises
// NotImplementedError naming the op and cuDNN's reason otherwise.
//
// Stats: with generate_stats, cuDNN's forward writes the softmax statistics
// as one f32 per row, [B, H, T, 1] packed, holding max + log Σ exp(s − max)
// of the scaled, masked scores s in natural log (stats_use_log2 is off by
// default) — the same quantity the hand kernel keeps as lse [B, H, T]. So the
// two layouts share memory and a forward of one path pairs with the backward
// of the other (a backward graph refused after its forward was built falls
// back to the hand kernel with cuDNN's lse).
//
// The backward of cuDNN may sum dQ with atomics; DDP_CUDNN_DETERMINISTIC=1
// (the knob that also restricts the convolutions) asks for its deterministic
// algorithm. DDP_CUDNN_ATTENTION=0 turns the cuDNN path off (read on every
// call, so a test can compare both paths in one process); the backward
// ignores it when only cuDNN takes the head size, as its forward must have
// used cuDNN then.

// GCC 12 at -O3 reports a -Wstringop-overflow inside the frontend's inlined
// ReshapeNode (a vector sized from a tensor rank it cannot bound): a false
// positive in a system header, silenced for this file (set before the first
// standard header, where the warning is located).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

#include "ddp/config.h"

#include <cuda_runtime.h>

#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/cuda_check.h"
#include "cuda/flash_attention.h"
#include "cuda/on_device.h"
#include "ddp/core/env.h"
#include "ddp/core/error.h"
#include "kernel_list.h"

#if DDP_HAVE_CUDNN
#include "nn/cudnn_graph.h"
#endif

namespace ddp::nn::functional {

namespace {

using cuda_kernels::OnDevice;
using kernels::PlanCacheStats;

constexpr const char* kOp = "scaled_dot_product_attention";

// [B, H, rows, D] contiguous as [B·H, rows, D] (f32 lse [B, H, T] as [B·H, T])
// for the hand kernel, which indexes by batch·head.
Tensor flat(const Tensor& t) {
  if (t.dim() == 3) return t.view({t.size(0) * t.size(1), t.size(2)});
  return t.view({t.size(0) * t.size(1), t.size(2), t.size(3)});
}

#if DDP_HAVE_CUDNN

namespace cg = cudnn_graph;
namespace fe = ::cudnn_frontend;

bool cudnn_enabled() { return env_bool("DDP_CUDNN_ATTENTION", true); }

bool deterministic_only() {
  static const bool on = env_bool("DDP_CUDNN_DETERMINISTIC", false);
  return on;
}

int compute_major(int device) {
  int major = 0;
  DDP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

// Whether cuDNN's fused attention may take this case (see the Note); a
// shape it still refuses is found when its graph is built.
bool cudnn_takes(const Device& device, DType dtype, int64_t head) {
  return (dtype == DType::f16 || dtype == DType::bf16) && head > 0 && head % 8 == 0 &&
         head <= 128 && compute_major(device.index) >= 8;
}

// Tensor uids of the graphs, bound to pointers at execution.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct SdpaGraph {
  std::unique_ptr<fe::graph::Graph> graph;  // null when cuDNN refused the case
  std::string refusal;                      // cuDNN's reason then
};

cg::GraphCache<SdpaGraph>& graph_cache() {
  static auto* c = new cg::GraphCache<SdpaGraph>;  // leaked, like the handles
  return *c;
}

// The dims and packed strides of [B, H, rows, cols].
struct Layout {
  std::vector<int64_t> dims, strides;
};
Layout packed(int64_t b, int64_t h, int64_t rows, int64_t cols) {
  return {{b, h, rows, cols}, {h * rows * cols, rows * cols, cols, 1}};
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name,
                                                    Uid uid, const Layout& l) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(l.dims).set_stride(
      l.strides));
}

void mark_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, Uid uid, const Layout& l) {
  t->set_output(true).set_uid(uid).set_dim(l.dims).set_stride(l.strides);
}

struct Problem {
  int64_t B, H, T, S, D;
  DType dtype;
  float scale;
  bool causal;
  int device;

  explicit Problem(const Tensor& q, const Tensor& k, float s, bool c)
      : B(q.size(0)), H(q.size(1)), T(q.size(2)), S(k.size(2)), D(q.size(3)), dtype(q.dtype()),
        scale(s), causal(c), device(q.device().index) {}

  std::string key(const char* pass) const {
    std::string key = pass;
    key += '|';
    for (int64_t v : {B, H, T, S, D, int64_t(dtype), int64_t(std::bit_cast<uint32_t>(scale)),
                      int64_t(causal), int64_t(deterministic_only()), int64_t(device)})
      cg::key_add(key, v);
    return key;
  }

  // An empty graph with the data types every SDPA graph uses: io in the
  // inputs' dtype, softmax and accumulation in f32.
  SdpaGraph start() const {
    SdpaGraph e;
    e.graph = std::make_unique<fe::graph::Graph>();
    e.graph->set_io_data_type(cg::data_type(dtype, kOp))
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return e;
  }

  static SdpaGraph finish(SdpaGraph e) {
    if (std::optional<std::string> why = cg::build(*e.graph, kOp)) {
      e.graph.reset();
      e.refusal = *why;
    }
    return e;
  }

  SdpaGraph build_forward() const {
    SdpaGraph e = start();
    fe::graph::Graph& g = *e.graph;
    auto q = input(g, "Q", kQ, packed(B, H, T, D));
    auto k = input(g, "K", kK, packed(B, H, S, D));
    auto v = input(g, "V", kV, packed(B, H, S, D));
    fe::graph::SDPA_attributes attrs;
    attrs.set_name("sdpa_forward").set_generate_stats(true).set_causal_mask(causal).set_attn_scale(
        scale);
    auto [o, stats] = g.sdpa(q, k, v, attrs);
    mark_output(o, kO, packed(B, H, T, D));
    mark_output(stats, kStats, packed(B, H, T, 1));
    stats->set_data_type(fe::DataType_t::FLOAT);
    return finish(std::move(e));
  }

  SdpaGraph build_backward() const {
    SdpaGraph e = start();
    fe::graph::Graph& g = *e.graph;
    auto q = input(g, "Q", kQ, packed(B, H, T, D));
    auto k = input(g, "K", kK, packed(B, H, S, D));
    auto v = input(g, "V", kV, packed(B, H, S, D));
    auto o = input(g, "O", kO, packed(B, H, T, D));
    auto d_o = input(g, "dO", kDO, packed(B, H, T, D));
    auto stats = input(g, "Stats", kStats, packed(B, H, T, 1));
    stats->set_data_type(fe::DataType_t::FLOAT);
    fe::graph::SDPA_backward_attributes attrs;
    attrs.set_name("sdpa_backward")
        .set_causal_mask(causal)
        .set_attn_scale(scale)
        .set_deterministic_algorithm(deterministic_only());
    auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, d_o, stats, attrs);
    mark_output(dq, kDQ, packed(B, H, T, D));
    mark_output(dk, kDK, packed(B, H, S, D));
    mark_output(dv, kDV, packed(B, H, S, D));
    return finish(std::move(e));
  }
};

// The cached graph for this pass; raises NotImplementedError when cuDNN
// refused it and the hand kernel cannot stand in.
std::shared_ptr<const SdpaGraph> graph_for(const Problem& p, bool forward) {
  auto entry = graph_cache().get_or_build(p.key(forward ? "forward" : "backward"), [&] {
    return forward ? p.build_forward() : p.build_backward();
  });
  if (!entry->graph && !cuda_kernels::flash_attention_supports(p.dtype, p.D))
    DDP_THROW(NotImplementedError,
              "{}: cuDNN has no fused attention engine for {} [B={}, H={}, T={}, S={}, D={}] "
              "({}) and the hand kernel takes head sizes 16, 32, 64 and 128 only",
              kOp, dtype_name(p.dtype), p.B, p.H, p.T, p.S, p.D, entry->refusal);
  return entry;
}

// cuDNN's attention engines load 16-byte vectors. The outputs are fresh
// allocations (aligned); an input that is a view at an odd offset (a slice
// of a larger buffer) is copied.
Tensor aligned(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 ? t : t.clone();
}

// Runs cuDNN's forward; false when cuDNN refused the case.
bool cudnn_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& out,
                   const Tensor& lse, float scale, bool causal) {
  auto entry = graph_for(Problem(q_in, k_in, scale, causal), true);
  if (!entry->graph) return false;
  const Tensor q = aligned(q_in), k = aligned(k_in), v = aligned(v_in);
  std::unordered_map<int64_t, void*> by_uid = {{kQ, q.data_ptr()},   {kK, k.data_ptr()},
                                               {kV, v.data_ptr()},   {kO, out.data_ptr()},
                                               {kStats, lse.data_ptr()}};
  cg::execute(*entry->graph, by_uid, q, kOp);
  return true;
}

bool cudnn_backward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                    const Tensor& out_in, const Tensor& dout_in, const Tensor& lse,
                    const Tensor& dq, const Tensor& dk, const Tensor& dv, float scale,
                    bool causal) {
  auto entry = graph_for(Problem(q_in, k_in, scale, causal), false);
  if (!entry->graph) return false;
  const Tensor q = aligned(q_in), k = aligned(k_in), v = aligned(v_in), out = aligned(out_in),
               dout = aligned(dout_in);
  std::unordered_map<int64_t, void*> by_uid = {
      {kQ, q.data_ptr()},     {kK, k.data_ptr()},     {kV, v.data_ptr()},
      {kO, out.data_ptr()},   {kDO, dout.data_ptr()}, {kStats, lse.data_ptr()},
      {kDQ, dq.data_ptr()},   {kDK, dk.data_ptr()},   {kDV, dv.data_ptr()}};
  cg::execute(*entry->graph, by_uid, q, kOp);
  return true;
}

#else  // no cuDNN: the hand kernel only

bool cudnn_takes(const Device&, DType, int64_t) { return false; }
bool cudnn_enabled() { return false; }

#endif  // DDP_HAVE_CUDNN

bool supports(const Device& device, DType dtype, int64_t head) {
  return cuda_kernels::flash_attention_supports(dtype, head) ||
         (cudnn_enabled() && cudnn_takes(device, dtype, head));
}

void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
             const Tensor& lse, float scale, bool causal) {
  OnDevice on(q);
  if (q.numel() == 0 || k.size(2) == 0) return;
#if DDP_HAVE_CUDNN
  if (cudnn_enabled() && cudnn_takes(q.device(), q.dtype(), q.size(3)) &&
      cudnn_forward(q, k, v, out, lse, scale, causal))
    return;
#endif
  cuda_kernels::flash_attention_forward(flat(q), flat(k), flat(v), flat(out), flat(lse), scale,
                                        causal, on.stream);
}

void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const Tensor& dout, const Tensor& lse, const Tensor& delta, const Tensor& dq,
              const Tensor& dk, const Tensor& dv, float scale, bool causal) {
  OnDevice on(q);
  if (q.numel() == 0 || k.size(2) == 0) return;
#if DDP_HAVE_CUDNN
  const bool hand_takes = cuda_kernels::flash_attention_supports(q.dtype(), q.size(3));
  if ((cudnn_enabled() || !hand_takes) && cudnn_takes(q.device(), q.dtype(), q.size(3)) &&
      cudnn_backward(q, k, v, out, dout, lse, dq, dk, dv, scale, causal))
    return;
#endif
  cuda_kernels::flash_attention_backward(flat(q), flat(k), flat(v), flat(out), flat(dout),
                                         flat(lse), flat(delta), flat(dq), flat(dk), flat(dv),
                                         scale, causal, on.stream);
}

PlanCacheStats cache_stats() {
#if DDP_HAVE_CUDNN
  return graph_cache().stats();
#else
  return {};
#endif
}

}  // namespace

DDP_REGISTER_KERNEL(attention_supports, CUDA, supports)
DDP_REGISTER_KERNEL(attention_forward, CUDA, forward)
DDP_REGISTER_KERNEL(attention_backward, CUDA, backward)
DDP_REGISTER_KERNEL(attention_cache_stats, CUDA, cache_stats)

}  // namespace ddp::nn::functional
