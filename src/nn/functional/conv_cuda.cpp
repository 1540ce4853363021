// conv2d on CUDA through cuDNN's convolution API.
//
// Note [cuDNN convolution]
// - Layout: x, y, dy, dx are described with their real strides, so NCHW and
//   NHWC tensors both go straight to cuDNN. With NHWC activations the filter
//   is described as NHWC too (cuDNN wants filter and activations in the same
//   format for its tensor-core kernels), which needs the weight in KRSC
//   order: the weight is copied into that layout per call (weights are
//   small), and dw computed in it and copied back.
// - Math: f16/bf16 use CUDNN_TENSOR_OP_MATH (tensor cores, f32
//   accumulation); f32 and f64 use CUDNN_FMA_MATH, i.e. no TF32, like the
//   cuBLAS matmuls (Note [cuBLAS bmm layouts]), so CUDA f32 agrees with the
//   CPU to f32 rounding.
// - Algorithms: the candidates of cuDNN's heuristics (cudnnGet*Algorithm_v7)
//   that are supported are cached per (geometry, pass, device) with their
//   workspace sizes and math types; conv2d_cache_stats(CUDA) counts hits.
//   A call runs the first candidate whose workspace can be allocated (an
//   out-of-memory falls back to the next candidate needing less), with the
//   math type cuDNN reported for that algorithm set on the descriptor.
//   DDP_CUDNN_DETERMINISTIC=1 keeps only the deterministic candidates.
//   Heuristics rather than cudnnFind*: Find times every algorithm on the GPU,
//   which needs large scratch allocations and makes results vary between
//   runs; heuristics are deterministic and cheap.
// - Workspace: a u8 ddp tensor on the current stream, so it comes from the
//   caching allocator and is reused by the next call on that stream.

#include "ddp/config.h"

#if DDP_HAVE_CUDNN

#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cuda_check.h"
#include "ddp/core/error.h"
#include "ddp/tensor/cuda.h"
#include "nn/cudnn_util.h"
#include "ddp/core/env.h"
#include "ddp/core/logging.h"
#include "ddp/nn/functional/conv.h"
#include "kernel_list.h"
#include "tensor/device_guard.h"

namespace ddp::nn::functional {

using kernels::ConvGeometry;
using kernels::PlanCacheStats;

namespace {

using namespace ::ddp::nn::cudnn_util;
constexpr const char* kOp = "conv2d (cuDNN)";

class FilterDesc {
 public:
  FilterDesc(const ConvGeometry& g) {
    DDP_CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc_));
    DDP_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
        desc_, data_type(g.dtype, kOp), g.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
        int(g.o), int(g.c / g.groups), int(g.kh), int(g.kw)));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(desc_); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

class ConvDesc {
 public:
  ConvDesc(const ConvGeometry& g) {
    DDP_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc_));
    const cudnnDataType_t compute = g.dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    DDP_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        desc_, int(g.padding.h), int(g.padding.w), int(g.stride.h), int(g.stride.w),
        int(g.dilation.h), int(g.dilation.w), CUDNN_CROSS_CORRELATION, compute));
    DDP_CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc_, int(g.groups)));
    const bool half = g.dtype == DType::f16 || g.dtype == DType::bf16;
    DDP_CUDNN_CHECK(
        cudnnSetConvolutionMathType(desc_, half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(desc_); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

enum class Pass { forward, backward_data, backward_weights };

struct Algo {
  int algo = 0;  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  size_t workspace = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
using Candidates = std::vector<Algo>;  // in the heuristic's order of preference

struct AlgoCache {
  std::mutex mu;
  std::unordered_map<std::string, Candidates> map;
  PlanCacheStats stats;
};

bool deterministic_only() {
  static const bool on = env_bool("DDP_CUDNN_DETERMINISTIC", false);
  return on;
}
AlgoCache& algo_cache() {
  static auto* c = new AlgoCache;  // leaked, like the handles (Note [cuDNN handles])
  return *c;
}

// The supported candidates of a v7 heuristic query (deterministic ones only
// under DDP_CUDNN_DETERMINISTIC=1).
template <class Perf, class Query>
Candidates pick(const char* what, Query query) {
  constexpr int kMax = 16;
  Perf perf[kMax];
  int returned = 0;
  DDP_CUDNN_CHECK(query(kMax, &returned, perf));
  Candidates out;
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (deterministic_only() && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
    out.push_back({int(perf[i].algo), perf[i].memory, perf[i].mathType});
  }
  DDP_CHECK_T(CudnnError, !out.empty(), "{}: no supported {} algorithm{}", kOp, what,
              deterministic_only() ? " is deterministic (DDP_CUDNN_DETERMINISTIC=1)" : "");
  return out;
}

struct Descriptors {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
};

Candidates find_algos(const ConvGeometry& g, Pass pass, cudnnHandle_t h, const Descriptors& d) {
  AlgoCache& c = algo_cache();
  int device = 0;
  DDP_CUDA_CHECK(cudaGetDevice(&device));
  const std::string key =
      g.key() + "|" + std::to_string(int(pass)) + "|dev" + std::to_string(device);
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.map.find(key);
    if (it != c.map.end()) {
      ++c.stats.hits;
      return it->second;
    }
  }
  Candidates a;
  switch (pass) {
    case Pass::forward:
      a = pick<cudnnConvolutionFwdAlgoPerf_t>("forward", [&](int n, int* r, auto* p) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(),
                                                      d.y.get(), n, r, p);
      });
      break;
    case Pass::backward_data:
      a = pick<cudnnConvolutionBwdDataAlgoPerf_t>("backward-data", [&](int n, int* r, auto* p) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(),
                                                           d.x.get(), n, r, p);
      });
      break;
    case Pass::backward_weights:
      a = pick<cudnnConvolutionBwdFilterAlgoPerf_t>("backward-filter", [&](int n, int* r, auto* p) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(),
                                                             d.w.get(), n, r, p);
      });
      break;
  }
  std::lock_guard<std::mutex> lock(c.mu);
  ++c.stats.misses;
  c.map.emplace(key, a);
  return a;
}

// Runs `call(algo, workspace)` with the first candidate whose workspace can be
// allocated, after setting that algorithm's math type on the descriptor.
template <class Call>
void run_first_fitting(const Candidates& candidates, const Descriptors& d, const Tensor& like,
                       Call&& call) {
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Algo& a = candidates[i];
    Tensor ws;
    try {
      ws = Tensor::empty({int64_t(a.workspace)}, TensorOptions(DType::u8).device(like.device()));
    } catch (const OutOfMemoryError& e) {
      if (i + 1 == candidates.size()) throw;
      DDP_LOG_WARNING("{}: no memory for a {} workspace ({}); trying the next algorithm", kOp,
                      a.workspace, e.what());
      continue;
    }
    DDP_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), a.math));
    call(a, ws);
    return;
  }
}

// The weight in the filter layout of Note [cuDNN convolution].
Tensor filter_layout(const ConvGeometry& g, const Tensor& w) {
  return g.channels_last ? to_channels_last(w) : w;
}

PlanCacheStats cache_stats() {
  AlgoCache& c = algo_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  PlanCacheStats s = c.stats;
  s.entries = int64_t(c.map.size());
  return s;
}

void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
             const Tensor& y) {
  CudaDeviceGuard guard(x.device().index);
  cudnnHandle_t h = handle();
  Descriptors d{TensorDesc(x, kOp), TensorDesc(y, kOp), FilterDesc(g), ConvDesc(g)};
  Tensor wf = filter_layout(g, w);
  Scale one(1.0), zero(0.0);
  run_first_fitting(find_algos(g, Pass::forward, h, d), d, x, [&](const Algo& a, const Tensor& ws) {
    DDP_CUDNN_CHECK(cudnnConvolutionForward(
        h, one.for_dtype(g.dtype), d.x.get(), x.data_ptr(), d.w.get(), wf.data_ptr(),
        d.conv.get(), cudnnConvolutionFwdAlgo_t(a.algo), ws.data_ptr(), a.workspace,
        zero.for_dtype(g.dtype), d.y.get(), y.data_ptr()));
  });
  if (g.has_bias) {
    TensorDesc bd(g.o, g.dtype, kOp);
    DDP_CUDNN_CHECK(cudnnAddTensor(h, one.for_dtype(g.dtype), bd.get(), b.data_ptr(),
                                   one.for_dtype(g.dtype), d.y.get(), y.data_ptr()));
  }
}

void backward_data(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  CudaDeviceGuard guard(dy.device().index);
  cudnnHandle_t h = handle();
  Descriptors d{TensorDesc(dx, kOp), TensorDesc(dy, kOp), FilterDesc(g), ConvDesc(g)};
  Tensor wf = filter_layout(g, w);
  Scale one(1.0), zero(0.0);
  run_first_fitting(
      find_algos(g, Pass::backward_data, h, d), d, dy, [&](const Algo& a, const Tensor& ws) {
        DDP_CUDNN_CHECK(cudnnConvolutionBackwardData(
            h, one.for_dtype(g.dtype), d.w.get(), wf.data_ptr(), d.y.get(), dy.data_ptr(),
            d.conv.get(), cudnnConvolutionBwdDataAlgo_t(a.algo), ws.data_ptr(), a.workspace,
            zero.for_dtype(g.dtype), d.x.get(), dx.data_ptr()));
      });
}

void backward_weights(const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                      const Tensor& db) {
  CudaDeviceGuard guard(x.device().index);
  cudnnHandle_t h = handle();
  Descriptors d{TensorDesc(x, kOp), TensorDesc(dy, kOp), FilterDesc(g), ConvDesc(g)};
  // In the filter layout; copied into the contiguous dw afterwards if that differs.
  Tensor dwf = g.channels_last ? empty_nchw(dw.shape(), g.dtype, dw.device(), true) : dw;
  Scale one(1.0), zero(0.0);
  run_first_fitting(
      find_algos(g, Pass::backward_weights, h, d), d, x, [&](const Algo& a, const Tensor& ws) {
        DDP_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
            h, one.for_dtype(g.dtype), d.x.get(), x.data_ptr(), d.y.get(), dy.data_ptr(),
            d.conv.get(), cudnnConvolutionBwdFilterAlgo_t(a.algo), ws.data_ptr(), a.workspace,
            zero.for_dtype(g.dtype), d.w.get(), dwf.data_ptr()));
      });
  if (!dwf.is_same(dw)) Tensor(dw).copy_(dwf);  // a handle copy: same storage
  if (db.defined()) {
    TensorDesc bd(g.o, g.dtype, kOp);
    DDP_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, one.for_dtype(g.dtype), d.y.get(),
                                                 dy.data_ptr(), zero.for_dtype(g.dtype), bd.get(),
                                                 db.data_ptr()));
  }
}

}  // namespace

DDP_REGISTER_KERNEL(conv2d_forward, CUDA, forward)
DDP_REGISTER_KERNEL(conv2d_backward_data, CUDA, backward_data)
DDP_REGISTER_KERNEL(conv2d_backward_weight, CUDA, backward_weights)
DDP_REGISTER_KERNEL(conv2d_cache_stats, CUDA, cache_stats)

}  // namespace ddp::nn::functional

#endif  // DDP_HAVE_CUDNN: without cuDNN there is no CUDA convolution kernel
