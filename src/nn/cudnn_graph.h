#pragma once
// Internal helpers for the layers written against cuDNN's graph API through
// the header-only cuDNN frontend (attention, convolution, batch norm). Only
// *_cuda.cpp files include this: it pulls in cudnn_frontend.h, which is heavy
// (about 35 s of compile time per file), so keep the files that include it
// few.
//
// Note [cuDNN graph API]
// A layer describes one operation (or a fused chain: conv + bias + ReLU,
// BN apply + add + ReLU, scaled-dot-product attention) as a frontend
// `Graph` whose tensors carry their real dims and strides and a numeric uid.
// Building a graph is expensive (heuristics, engine selection, plan
// compilation: 0.1–100 ms), so a built graph is cached in a GraphCache keyed
// by everything that shapes the plan (dims, strides, dtypes, flags, device)
// and reused on every later call with new pointers bound by uid
// (execute()). The workspace comes from the caching allocator on the current
// stream, like every other scratch buffer. A case no engine supports is not
// an error inside build(): build() returns the frontend's message and the
// caller decides (fall back, or raise with the op's name).
// Thread safety: the cache is locked for lookup and insertion only; a built
// graph is executed from many threads at once, each with its own handle
// (cudnn_util::handle()), as cuDNN's execution plans allow.

#include <cudnn_frontend.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "ddp/core/dtype.h"
#include "ddp/tensor/tensor.h"
#include "kernel_list.h"
#include "nn/cudnn_util.h"

namespace ddp::nn::cudnn_graph {

namespace fe = ::cudnn_frontend;

// FLOAT / DOUBLE / HALF / BFLOAT16; DTypeError naming `op` otherwise.
fe::DataType_t data_type(DType dtype, const char* op);

// Raises CudnnError "<op>: <what> failed: <frontend message>" when bad (by
// value: the frontend's accessors are not const).
void check(fe::error_t status, const char* op, const char* what);

// Dims and strides of t as the frontend wants them (int64 vectors).
std::vector<int64_t> dims_of(const Tensor& t);
std::vector<int64_t> strides_of(const Tensor& t);

// validate + build_operation_graph + plans from heuristics A with FALLBACK +
// check_support + build_plans on the calling thread's handle. Returns the
// frontend's message when no engine supports the graph (or validation finds
// it outside the operation's support surface: GRAPH_NOT_SUPPORTED); raises
// CudnnError on anything else.
std::optional<std::string> build(fe::graph::Graph& graph, const char* op);
// The same, with `filter` run on the graph between the heuristics and the
// support check, to narrow the candidate engines (deselect_numeric_notes:
// TF32 tensor cores, non-deterministic engines; see Note [cuDNN TF32]).
// Filtering every candidate away reads as "not supported".
std::optional<std::string> build(fe::graph::Graph& graph, const char* op,
                                 const std::function<void(fe::graph::Graph&)>& filter);

// Runs a built graph on the current stream with the tensors bound by uid,
// with a workspace from the caching allocator.
void execute(const fe::graph::Graph& graph, std::unordered_map<int64_t, void*>& by_uid,
             const Tensor& like, const char* op);

// Appends a value to a cache key (fields separated, so "1,23" ≠ "12,3").
inline void key_add(std::string& key, int64_t v) {
  key += std::to_string(v);
  key += ',';
}
// dtype, dims and strides of t.
void key_add(std::string& key, const Tensor& t);

// Built graphs by key. `Entry` holds the graph and whatever the caller needs
// beside it (uids, workspace size, a "not supported" verdict, ...). The
// builder runs outside the lock; two threads racing on one new key both
// build and the first insertion wins (harmless: graphs are immutable once
// built).
template <class Entry>
class GraphCache {
 public:
  std::shared_ptr<const Entry> get_or_build(const std::string& key,
                                            const std::function<Entry()>& builder) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (auto it = map_.find(key); it != map_.end()) {
        ++stats_.hits;
        return it->second;
      }
      ++stats_.misses;
    }
    auto built = std::make_shared<const Entry>(builder());
    std::lock_guard<std::mutex> g(mu_);
    auto [it, inserted] = map_.emplace(key, std::move(built));
    stats_.entries = int64_t(map_.size());
    return it->second;
  }
  kernels::PlanCacheStats stats() const {
    std::lock_guard<std::mutex> g(mu_);
    return stats_;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Entry>> map_;
  kernels::PlanCacheStats stats_{};
};

}  // namespace ddp::nn::cudnn_graph
