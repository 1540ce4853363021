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
// Pointers: every graph assumes 16-byte-aligned data pointers (the
// frontend's default); callers stage misaligned operands through aligned
// copies (Note [cuDNN pointer alignment] in kernels/cuda/cudnn_policy.h). When
// the chosen plan's workspace cannot be allocated, execute() runs the next
// candidate plan whose workspace fits (Note [cuDNN workspace fallback]).
// Thread safety: built graphs are never shared between threads. The cache
// is per thread (Note [Per-thread graph caches] in
// kernels/cuda/cudnn_graph_cache.h): cuDNN does not promise that every engine's
// execution plan may run from two threads at once, and execute() may build
// further plans into a graph. Each thread executes its own graphs with its
// own handle (cudnn_util::handle()); a thread's first call of a key builds
// that key's graph on that thread (a thread that took over an exited
// thread's shard reuses its graphs). Caches are leaked, never destroyed
// (cuDNN's engine libraries may be unloaded by then).

#include <cudnn_frontend.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "ddp/core/dtype.h"
#include "ddp/tensor/tensor.h"
#include "kernel_list.h"
#include "cuda/cudnn_graph_cache.h"
#include "cuda/cudnn_util.h"

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
// with a workspace from the caching allocator: the heuristics' plan, or,
// when its workspace does not fit, the next candidate plan whose workspace
// does (built into the graph on first need, hence the non-const graph);
// OutOfMemoryError naming the plans tried when none fits. See Note [cuDNN
// workspace fallback] in kernels/cuda/cudnn_policy.h. Every pointer must be
// 16-byte aligned (Note [cuDNN pointer alignment]).
void execute(fe::graph::Graph& graph, std::unordered_map<int64_t, void*>& by_uid,
             const Tensor& like, const char* op);

// Appends a value to a cache key (fields separated, so "1,23" ≠ "12,3").
inline void key_add(std::string& key, int64_t v) {
  key += std::to_string(v);
  key += ',';
}
// dtype, dims and strides of t.
void key_add(std::string& key, const Tensor& t);

// GraphCache<Entry>: built graphs by key, one map per thread; see
// kernels/cuda/cudnn_graph_cache.h.

}  // namespace ddp::nn::cudnn_graph
