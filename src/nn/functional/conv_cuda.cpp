// conv2d on CUDA through cuDNN's graph API (Note [cuDNN graph API] in
// src/nn/cudnn_graph.h).
//
// Note [cuDNN convolution]
// - Graphs: one per pass, fprop (x, w -> y), dgrad (dy, w -> dx) and wgrad
//   (x, dy -> dw), plus the inference fusion conv + bias + ReLU (fprop with
//   two pointwise ops, ADD and RELU_FWD, on an f32 intermediate; see
//   conv2d_bias_relu in ddp/nn/functional/conv.h). Groups are read off the
//   tensor dims (x's C over w's C/groups). Compute type: f32 (f64 for f64).
//   A plain conv2d's bias is added after fprop with cudnnAddTensor and its
//   gradient summed by cudnnConvolutionBackwardBias, so a bias never decides
//   whether an engine exists.
// - Plan cache: a built graph is cached per (pass, geometry, the dims and
//   strides of every tensor, dtype, TF32 switch, determinism, device) and
//   reused with new pointers bound by uid; conv2d_cache_stats(CUDA) reports
//   that cache (a hit is a call that built nothing). A key no engine takes
//   is cached too, with its verdict, so it is not rebuilt on every call.
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
//   caching allocator and is reused by the next call on that stream. An
//   out-of-memory there raises OutOfMemoryError (the legacy path's retry
//   with a smaller-workspace algorithm has no equivalent here: the plan is
//   fixed once built).

#include "ddp/config.h"

#if DDP_HAVE_CUDNN

#include <cuda_runtime.h>

#include <optional>
#include <string>
#include <unordered_map>

#include "core/cuda_check.h"
#include "ddp/core/error.h"
#include "ddp/nn/cudnn.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/layout_conversions.h"
#include "kernel_list.h"
#include "nn/cudnn_graph.h"
#include "nn/cudnn_util.h"
#include "tensor/device_guard.h"

namespace ddp::nn::functional {

using kernels::ConvGeometry;
using kernels::PlanCacheStats;

namespace {

namespace fe = ::cudnn_frontend;
namespace cg = ::ddp::nn::cudnn_graph;
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
};

cg::GraphCache<Plan>& plan_cache() {
  static auto* c = new cg::GraphCache<Plan>;  // leaked, like the handles (Note [cuDNN handles])
  return *c;
}

bool tf32_allowed(DType dtype) { return dtype == DType::f32 && cudnn::allow_tf32(); }

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
// (dy for wgrad), out = y (dx, dw); bias only for fprop_bias_relu.
std::shared_ptr<fe::graph::Graph> describe(const ConvGeometry& g, Pass pass, const Tensor& a,
                                           const Tensor& b, const Tensor& bias,
                                           const Tensor& out) {
  auto graph = new_graph(g.dtype);
  switch (pass) {
    case Pass::fprop:
    case Pass::fprop_bias_relu: {
      auto x = input(*graph, "x", kX, a), w = input(*graph, "w", kW, b);
      auto y = graph->conv_fprop(x, w, conv_attributes<fe::graph::Conv_fprop_attributes>(g));
      if (pass == Pass::fprop_bias_relu) {
        // y stays virtual: an f32 (f64) intermediate, never written to memory.
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
        y = graph->pointwise(
            y, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
      }
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

// The cached plan of `pass` over these tensors (built on a miss).
std::shared_ptr<const Plan> plan_for(const ConvGeometry& g, Pass pass, const Tensor& a,
                                     const Tensor& b, const Tensor& bias, const Tensor& out) {
  const bool tf32 = tf32_allowed(g.dtype);
  const bool deterministic = cudnn::deterministic();
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
    auto filter = [&](fe::graph::Graph& gr) {
      std::vector<fe::NumericalNote_t> barred;
      if (g.dtype == DType::f32) {
        // Never f32 inputs converted to f16 (not TF32: a precision loss no
        // switch asked for); tensor cores (TF32) only when allowed.
        barred.push_back(fe::NumericalNote_t::DOWN_CONVERT_INPUTS);
        if (!tf32) barred.push_back(fe::NumericalNote_t::TENSOR_CORE);
      }
      if (deterministic) barred.push_back(fe::NumericalNote_t::NONDETERMINISTIC);
      if (!barred.empty()) gr.deselect_numeric_notes(barred);
    };
    std::optional<std::string> why;
    try {
      why = cg::build(*graph, kOp, filter);
    } catch (const CudnnError& e) {
      // Heuristics or the operation graph refusing the case (an f64 fusion,
      // a layout pairing) is "no engine" too: the caller falls back.
      why = e.what();
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
  detail::count_layout_conversion();  // Note [Layout conversion count]
  return g.channels_last ? to_channels_last(w) : w.contiguous();
}

void add_bias(const ConvGeometry& g, const Tensor& b, const Tensor& y) {
  using namespace ::ddp::nn::cudnn_util;
  TensorDesc bd(g.o, g.dtype, kOp), yd(y, kOp);
  Scale one(1.0);
  DDP_CUDNN_CHECK(cudnnAddTensor(handle(), one.for_dtype(g.dtype), bd.get(), b.data_ptr(),
                                 one.for_dtype(g.dtype), yd.get(), y.data_ptr()));
}

// fprop or dgrad with w as it is, else (no engine) with w in x's layout.
void run_with_weight(const ConvGeometry& g, Pass pass, const Tensor& in, const Tensor& w,
                     const Tensor& out, int64_t in_uid, int64_t out_uid) {
  auto p = plan_for(g, pass, in, w, Tensor(), out);
  Tensor wr = w;
  if (!p->graph && !same_layout(g, w)) {
    wr = in_x_layout(g, w);
    p = plan_for(g, pass, in, wr, Tensor(), out);
  }
  if (!p->graph) no_engine(g, pass, *p);
  run(*p, {{in_uid, in.data_ptr()}, {kW, wr.data_ptr()}, {out_uid, out.data_ptr()}}, in);
}

PlanCacheStats cache_stats() { return plan_cache().stats(); }

void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
             const Tensor& y) {
  CudaDeviceGuard guard(x.device().index);
  run_with_weight(g, Pass::fprop, x, w, y, kX, kY);
  if (g.has_bias) add_bias(g, b, y);
}

void backward_data(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  CudaDeviceGuard guard(dy.device().index);
  run_with_weight(g, Pass::dgrad, dy, w, dx, kY, kX);
}

void backward_weights(const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                      const Tensor& db) {
  CudaDeviceGuard guard(x.device().index);
  auto p = plan_for(g, Pass::wgrad, x, dy, Tensor(), dw);
  Tensor target = dw;
  if (!p->graph && !same_layout(g, dw)) {
    detail::count_layout_conversion();
    target = empty_nchw(dw.shape(), g.dtype, dw.device(), g.channels_last);
    p = plan_for(g, Pass::wgrad, x, dy, Tensor(), target);
  }
  if (!p->graph) no_engine(g, Pass::wgrad, *p);
  run(*p, {{kX, x.data_ptr()}, {kY, dy.data_ptr()}, {kW, target.data_ptr()}}, x);
  if (!target.is_same(dw)) Tensor(dw).copy_(target);  // a handle copy: same storage
  if (db.defined()) {
    using namespace ::ddp::nn::cudnn_util;
    TensorDesc bd(g.o, g.dtype, kOp), dyd(dy, kOp);
    Scale one(1.0), zero(0.0);
    DDP_CUDNN_CHECK(cudnnConvolutionBackwardBias(handle(), one.for_dtype(g.dtype), dyd.get(),
                                                 dy.data_ptr(), zero.for_dtype(g.dtype), bd.get(),
                                                 db.data_ptr()));
  }
}

// conv + bias + ReLU in one graph; false (nothing written) when no engine
// takes the fused graph, and the frontend composes instead.
bool forward_bias_relu(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                       const Tensor& y) {
  CudaDeviceGuard guard(x.device().index);
  auto p = plan_for(g, Pass::fprop_bias_relu, x, w, b, y);
  if (!p->graph) return false;
  std::unordered_map<int64_t, void*> by_uid{
      {kX, x.data_ptr()}, {kW, w.data_ptr()}, {kY, y.data_ptr()}};
  if (b.defined()) by_uid[kB] = b.data_ptr();
  run(*p, std::move(by_uid), x);
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
