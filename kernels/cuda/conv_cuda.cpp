// conv2d on CUDA through cuDNN's graph API (Note [cuDNN graph API] in
// kernels/cuda/cudnn_graph.h).
//
// Note [cuDNN convolution]
// - Graphs: one per pass, fprop (x, w -> y), dgrad (dy, w -> dx) and wgrad
//   (x, dy -> dw), plus the inference fusion conv + bias + ReLU (fprop with
//   two pointwise ops, ADD and RELU_FWD, on an f32 intermediate; see
//   conv2d_bias_relu in ddp/nn/functional/conv.h). Groups are read off the
//   tensor dims (x's C over w's C/groups). Compute type: f32 (f64 for f64).
// - Bias: a plain conv2d's forward with a bias first tries fprop + ADD in
//   one graph (the bias added to the f32 accumulator, y written once);
//   when no engine takes that graph (f64, TF32 off, some layouts), the same
//   cache entry holds the plain fprop graph and the bias is added after it
//   by libddp's broadcast add (f32 arithmetic, bf16 included), so a bias
//   never decides whether the convolution runs (cudnn_policy::
//   conv_bias_path). The bias gradient is libddp's sum of dy over N, H, W,
//   accumulated in f32 (f64 for f64) and rounded once to the bias dtype
//   (cudnn_policy::conv_bias_grad): the legacy cudnnAddTensor /
//   cudnnConvolutionBackwardBias documented no bf16 and were slow on NHWC.
// - Plan cache: a built graph is cached per (pass, geometry, the dims and
//   strides of every tensor, dtype, TF32 switch, determinism, device) and
//   reused with new pointers bound by uid; conv2d_cache_stats(CUDA) reports
//   that cache, summed over threads (a hit is a call that built nothing;
//   the cache is per thread, Note [Per-thread graph caches]). A key no
//   engine takes is cached too, with its verdict, so it is not rebuilt on
//   every call.
// - Alignment: the graphs assume 16-byte-aligned pointers; a misaligned
//   operand (a view at an odd offset) is copied to aligned memory first and
//   a misaligned output computed into aligned scratch and copied back
//   (Note [cuDNN pointer alignment] in kernels/cuda/cudnn_policy.h).
// - Layout: every tensor is described with its real strides, weight
//   included, so a channels-last model (Module::to(MemoryFormat::
//   channels_last): x, w, y NHWC) and an NCHW one both run with no copy; dw
//   is written with w's strides. A weight whose layout differs from x's
//   (an NCHW weight with NHWC activations, or the reverse) is described as
//   it is too. Only when no engine takes that pairing is the weight copied
//   into x's layout for the call (fprop, dgrad), or dw computed in x's
//   layout and copied into w's (wgrad); each such copy counts in
//   layout_conversion_count() (Note [Layout conversion count]), so a test
//   or a profile sees it.
// - Math: f16/bf16 run on tensor cores with f32 accumulation; f64 never
//   does. f32 may use TF32 tensor cores unless nn::cudnn::set_allow_tf32(
//   false) or DDP_CUDNN_ALLOW_TF32=0 (Note [cuDNN TF32] in ddp/nn/cudnn.h):
//   then every candidate engine with the TENSOR_CORE numerical note is
//   removed before the support check. Engines with the
//   DOWN_CONVERT_INPUTS note (f32 inputs computed in f16) never run f32.
// - DDP_CUDNN_DETERMINISTIC=1 removes the engines with the NONDETERMINISTIC
//   numerical note; a pass left with no engine raises CudnnError naming the
//   switch.
// - Engines: the frontend's heuristics (mode A, then FALLBACK) and the first
//   candidate that passes the support check. Heuristics rather than
//   autotuning: timing every engine needs large scratch allocations and
//   makes the choice vary between runs.
// - Workspace: a u8 ddp tensor on the current stream, so it comes from the
//   caching allocator and is reused by the next call on that stream. When
//   the chosen plan's workspace cannot be allocated, the next candidate
//   plan whose workspace fits runs instead; OutOfMemoryError only when none
//   fits (Note [cuDNN workspace fallback] in kernels/cuda/cudnn_policy.h).

#include "ddp/config.h"

#if DDP_HAVE_CUDNN

#include <cuda_runtime.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cuda_check.h"
#include "core/cudnn_flags.h"
#include "ddp/core/error.h"
#include "ddp/tensor/memory_format.h"
#include "kernel_list.h"
#include "cuda/cudnn_graph.h"
#include "cuda/cudnn_policy.h"
#include "tensor/device_guard.h"
#include "tensor/layout_stats.h"

namespace ddp::nn::functional {

using kernels::ConvGeometry;
using kernels::PlanCacheStats;

namespace {

namespace fe = ::cudnn_frontend;
namespace cg = ::ddp::nn::cudnn_graph;
namespace cp = ::ddp::nn::cudnn_policy;
constexpr const char* kOp = "conv2d (cuDNN)";

enum class Pass { fprop, dgrad, wgrad, fprop_bias_relu };
const char* pass_name(Pass p) {
  switch (p) {
    case Pass::fprop: return "fprop";
    case Pass::dgrad: return "dgrad";
    case Pass::wgrad: return "wgrad";
    case Pass::fprop_bias_relu: return "fprop+bias+relu";
  }
  return "?";
}

// Tensor uids, bound in execute().
constexpr int64_t kX = 1, kW = 2, kY = 3, kB = 4;

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // null when no engine takes the graph
  std::string unsupported;                  // the frontend's reason, when null
  // fprop with a bias: whether the graph adds it (else the caller does).
  cp::BiasPath bias = cp::BiasPath::none;
};

cg::GraphCache<Plan>& plan_cache() {
  // Leaked, per thread: see Note [Per-thread graph caches].
  static auto* c = new cg::GraphCache<Plan>;
  return *c;
}

bool tf32_allowed(DType dtype) { return dtype == DType::f32 && cudnn_flags::allow_tf32(); }

std::shared_ptr<fe::graph::Graph> new_graph(DType dtype) {
  const fe::DataType_t compute =
      dtype == DType::f64 ? fe::DataType_t::DOUBLE : fe::DataType_t::FLOAT;
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(cg::data_type(dtype, kOp))
      .set_intermediate_data_type(compute)
      .set_compute_data_type(compute);
  return graph;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& graph, const char* name,
                                                    int64_t uid, const Tensor& t) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim(cg::dims_of(t))
                          .set_stride(cg::strides_of(t))
                          .set_data_type(cg::data_type(t.dtype(), kOp)));
}

void mark_output(const std::shared_ptr<fe::graph::Tensor_attributes>& out, int64_t uid,
                 const Tensor& t) {
  out->set_output(true)
      .set_uid(uid)
      .set_dim(cg::dims_of(t))
      .set_stride(cg::strides_of(t))
      .set_data_type(cg::data_type(t.dtype(), kOp));
}

template <class Attributes>
Attributes conv_attributes(const ConvGeometry& g) {
  Attributes a;
  a.set_padding({g.padding.h, g.padding.w})
      .set_stride({g.stride.h, g.stride.w})
      .set_dilation({g.dilation.h, g.dilation.w});
  a.set_compute_data_type(g.dtype == DType::f64 ? fe::DataType_t::DOUBLE : fe::DataType_t::FLOAT);
  return a;
}

// The graph of `pass` over these tensors: a = x (dy for dgrad), b = w
// (dy for wgrad), out = y (dx, dw). A defined bias is added in the graph
// (fprop, fprop_bias_relu).
std::shared_ptr<fe::graph::Graph> describe(const ConvGeometry& g, Pass pass, const Tensor& a,
                                           const Tensor& b, const Tensor& bias,
                                           const Tensor& out) {
  auto graph = new_graph(g.dtype);
  switch (pass) {
    case Pass::fprop:
    case Pass::fprop_bias_relu: {
      auto x = input(*graph, "x", kX, a), w = input(*graph, "w", kW, b);
      auto y = graph->conv_fprop(x, w, conv_attributes<fe::graph::Conv_fprop_attributes>(g));
      // With a bias or a ReLU after it, y stays virtual: an f32 (f64)
      // intermediate, never written to memory.
      if (bias.defined()) {
        // [O] seen as [1, O, 1, 1].
        auto bt = graph->tensor(fe::graph::Tensor_attributes()
                                    .set_name("b")
                                    .set_uid(kB)
                                    .set_dim({1, g.o, 1, 1})
                                    .set_stride({g.o, 1, 1, 1})
                                    .set_data_type(cg::data_type(g.dtype, kOp)));
        y = graph->pointwise(
            y, bt, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
      }
      if (pass == Pass::fprop_bias_relu)
        y = graph->pointwise(
            y, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
      mark_output(y, kY, out);
      break;
    }
    case Pass::dgrad: {
      auto dy = input(*graph, "dy", kY, a), w = input(*graph, "w", kW, b);
      mark_output(graph->conv_dgrad(dy, w, conv_attributes<fe::graph::Conv_dgrad_attributes>(g)),
                  kX, out);
      break;
    }
    case Pass::wgrad: {
      auto x = input(*graph, "x", kX, a), dy = input(*graph, "dy", kY, b);
      mark_output(graph->conv_wgrad(dy, x, conv_attributes<fe::graph::Conv_wgrad_attributes>(g)),
                  kW, out);
      break;
    }
  }
  return graph;
}

// Builds `graph` with the engine filter of this call's switches; the
// frontend's reason when no engine takes it.
std::optional<std::string> try_build(fe::graph::Graph& graph, DType dtype, bool tf32,
                                     bool deterministic) {
  auto filter = [&](fe::graph::Graph& gr) {
    std::vector<fe::NumericalNote_t> barred;
    if (dtype == DType::f32) {
      // Never f32 inputs converted to f16 (not TF32: a precision loss no
      // switch asked for); tensor cores (TF32) only when allowed.
      barred.push_back(fe::NumericalNote_t::DOWN_CONVERT_INPUTS);
      if (!tf32) barred.push_back(fe::NumericalNote_t::TENSOR_CORE);
    }
    if (deterministic) barred.push_back(fe::NumericalNote_t::NONDETERMINISTIC);
    if (!barred.empty()) gr.deselect_numeric_notes(barred);
  };
  try {
    return cg::build(graph, kOp, filter);
  } catch (const CudnnError& e) {
    // Heuristics or the operation graph refusing the case (an f64 fusion,
    // a layout pairing) is "no engine" too: the caller falls back.
    return std::string(e.what());
  }
}

// The cached plan of `pass` over these tensors (built on a miss). For fprop
// with a bias the entry is the fused fprop + ADD graph when an engine takes
// it, else the plain fprop graph (Plan::bias says which).
std::shared_ptr<const Plan> plan_for(const ConvGeometry& g, Pass pass, const Tensor& a,
                                     const Tensor& b, const Tensor& bias, const Tensor& out) {
  const bool tf32 = tf32_allowed(g.dtype);
  const bool deterministic = cudnn_flags::deterministic();
  int device = 0;
  DDP_CUDA_CHECK(cudaGetDevice(&device));
  std::string key = pass_name(pass);
  key += '|';
  key += g.key();
  key += '|';
  cg::key_add(key, a);
  cg::key_add(key, b);
  cg::key_add(key, out);
  key += bias.defined() ? "bias|" : "|";
  key += tf32 ? "tf32|" : "fma|";
  key += deterministic ? "det|" : "|";
  cg::key_add(key, device);
  return plan_cache().get_or_build(key, [&]() {
    Plan p;
    auto graph = describe(g, pass, a, b, bias, out);
    std::optional<std::string> why = try_build(*graph, g.dtype, tf32, deterministic);
    if (pass == Pass::fprop && bias.defined()) {
      p.bias = cp::conv_bias_path(true, !why);
      if (p.bias == cp::BiasPath::added_after) {
        graph = describe(g, pass, a, b, Tensor(), out);
        why = try_build(*graph, g.dtype, tf32, deterministic);
      }
    }
    if (why) {
      p.unsupported = *why;
      if (!tf32 && g.dtype == DType::f32) p.unsupported += " (TF32 off: tensor-core engines barred)";
      if (deterministic) p.unsupported += " (DDP_CUDNN_DETERMINISTIC=1: non-deterministic engines barred)";
    } else {
      p.graph = std::move(graph);
    }
    return p;
  });
}

void run(const Plan& p, std::unordered_map<int64_t, void*> by_uid, const Tensor& like) {
  cg::execute(*p.graph, by_uid, like, kOp);
}

[[noreturn]] void no_engine(const ConvGeometry& g, Pass pass, const Plan& p) {
  DDP_THROW(CudnnError, "{}: no cuDNN engine for {} of {}: {}", kOp, pass_name(pass), g.key(),
            p.unsupported);
}

// x's layout applied to a weight-shaped tensor.
bool same_layout(const ConvGeometry& g, const Tensor& w) {
  return g.channels_last ? is_channels_last(w) : w.is_contiguous();
}
Tensor in_x_layout(const ConvGeometry& g, const Tensor& w) {
  layout_stats::count_conversion();  // Note [Layout conversion count]
  return g.channels_last ? to_channels_last(w) : w.contiguous();
}

// fprop (with its bias, when given) or dgrad with w as it is, else (no
// engine) with w in x's layout. All pointers aligned (the callers stage).
void run_with_weight(const ConvGeometry& g, Pass pass, const Tensor& in, const Tensor& w,
                     const Tensor& bias, const Tensor& out, int64_t in_uid, int64_t out_uid) {
  auto p = plan_for(g, pass, in, w, bias, out);
  Tensor wr = w;
  if (!p->graph && !same_layout(g, w)) {
    wr = in_x_layout(g, w);  // fresh, so aligned
    p = plan_for(g, pass, in, wr, bias, out);
  }
  if (!p->graph) no_engine(g, pass, *p);
  std::unordered_map<int64_t, void*> by_uid{
      {in_uid, in.data_ptr()}, {kW, wr.data_ptr()}, {out_uid, out.data_ptr()}};
  if (p->bias == cp::BiasPath::in_graph) by_uid[kB] = bias.data_ptr();
  run(*p, std::move(by_uid), in);
  if (p->bias == cp::BiasPath::added_after) {
    // libddp's broadcast add: f32 arithmetic for f16/bf16, rounded once.
    // out is the frontend's fresh output and the bias is detached, so the
    // in-place add (never recorded) needs no grad-mode guard.
    Tensor(out).add_(bias.view({1, g.o, 1, 1}));
  }
}

PlanCacheStats cache_stats() { return plan_cache().stats(); }

void forward(const ConvGeometry& g, const Tensor& x_in, const Tensor& w_in, const Tensor& b_in,
             const Tensor& y_in) {
  CudaDeviceGuard guard(x_in.device().index);
  cp::AlignedOperands ops;  // Note [cuDNN pointer alignment]
  const Tensor x = ops.input(x_in), w = ops.input(w_in), y = ops.output(y_in);
  const Tensor b = g.has_bias ? ops.input(b_in) : Tensor();
  run_with_weight(g, Pass::fprop, x, w, b, y, kX, kY);
  ops.finish();
}

void backward_data(const ConvGeometry& g, const Tensor& dy_in, const Tensor& w_in,
                   const Tensor& dx_in) {
  CudaDeviceGuard guard(dy_in.device().index);
  cp::AlignedOperands ops;
  const Tensor dy = ops.input(dy_in), w = ops.input(w_in), dx = ops.output(dx_in);
  run_with_weight(g, Pass::dgrad, dy, w, Tensor(), dx, kY, kX);
  ops.finish();
}

void backward_weights(const ConvGeometry& g, const Tensor& x_in, const Tensor& dy_in,
                      const Tensor& dw_in, const Tensor& db) {
  CudaDeviceGuard guard(x_in.device().index);
  cp::AlignedOperands ops;
  const Tensor x = ops.input(x_in), dy = ops.input(dy_in), dw = ops.output(dw_in);
  auto p = plan_for(g, Pass::wgrad, x, dy, Tensor(), dw);
  Tensor target = dw;
  if (!p->graph && !same_layout(g, dw)) {
    layout_stats::count_conversion();
    target = empty_nchw(dw.shape(), g.dtype, dw.device(), g.channels_last);
    p = plan_for(g, Pass::wgrad, x, dy, Tensor(), target);
  }
  if (!p->graph) no_engine(g, Pass::wgrad, *p);
  run(*p, {{kX, x.data_ptr()}, {kY, dy.data_ptr()}, {kW, target.data_ptr()}}, x);
  if (!target.is_same(dw)) Tensor(dw).copy_(target);  // a handle copy: same storage
  ops.finish();
  // Σ dy over N, H, W in f32, rounded once (Note [cuDNN convolution]); no
  // pointer goes to cuDNN here, so dy_in needs no staging.
  if (db.defined()) Tensor(db).copy_(cp::conv_bias_grad(dy_in));
}

// conv + bias + ReLU in one graph; false (nothing written) when no engine
// takes the fused graph, and the frontend composes instead.
bool forward_bias_relu(const ConvGeometry& g, const Tensor& x_in, const Tensor& w_in,
                       const Tensor& b_in, const Tensor& y_in) {
  CudaDeviceGuard guard(x_in.device().index);
  cp::AlignedOperands ops;
  const Tensor x = ops.input(x_in), w = ops.input(w_in), b = ops.input(b_in),
               y = ops.output(y_in);
  auto p = plan_for(g, Pass::fprop_bias_relu, x, w, b, y);
  if (!p->graph) return false;
  std::unordered_map<int64_t, void*> by_uid{
      {kX, x.data_ptr()}, {kW, w.data_ptr()}, {kY, y.data_ptr()}};
  if (b.defined()) by_uid[kB] = b.data_ptr();
  run(*p, std::move(by_uid), x);
  ops.finish();
  return true;
}

}  // namespace

DDP_REGISTER_KERNEL(conv2d_forward, CUDA, forward)
DDP_REGISTER_KERNEL(conv2d_backward_data, CUDA, backward_data)
DDP_REGISTER_KERNEL(conv2d_backward_weight, CUDA, backward_weights)
DDP_REGISTER_KERNEL(conv2d_bias_relu_forward, CUDA, forward_bias_relu)
DDP_REGISTER_KERNEL(conv2d_cache_stats, CUDA, cache_stats)

}  // namespace ddp::nn::functional

#endif  // DDP_HAVE_CUDNN: without cuDNN there is no CUDA convolution kernel
