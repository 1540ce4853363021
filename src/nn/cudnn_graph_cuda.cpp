// See src/nn/cudnn_graph.h and Note [cuDNN graph API] there.

#include "ddp/config.h"

#if DDP_HAVE_CUDNN

#include "nn/cudnn_graph.h"

#include "ddp/core/error.h"

namespace ddp::nn::cudnn_graph {

fe::DataType_t data_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32: return fe::DataType_t::FLOAT;
    case DType::f64: return fe::DataType_t::DOUBLE;
    case DType::f16: return fe::DataType_t::HALF;
    case DType::bf16: return fe::DataType_t::BFLOAT16;
    default: break;
  }
  DDP_THROW(DTypeError, "{}: cuDNN takes f32, f64, f16 or bf16, got {}", op, dtype_name(dtype));
}

void check(fe::error_t status, const char* op, const char* what) {
  if (status.is_bad())
    DDP_THROW(CudnnError, "{}: {} failed: {} (cuDNN frontend error {})", op, what,
              status.get_message(), int(status.get_code()));
}

std::vector<int64_t> dims_of(const Tensor& t) {
  return std::vector<int64_t>(t.shape().begin(), t.shape().end());
}

std::vector<int64_t> strides_of(const Tensor& t) {
  return std::vector<int64_t>(t.strides().begin(), t.strides().end());
}

void key_add(std::string& key, const Tensor& t) {
  key += dtype_name(t.dtype());
  key += ':';
  for (int64_t d : t.shape()) key_add(key, d);
  key += '/';
  for (int64_t s : t.strides()) key_add(key, s);
  key += ';';
}

std::optional<std::string> build(fe::graph::Graph& graph, const char* op) {
  return build(graph, op, {});
}

std::optional<std::string> build(fe::graph::Graph& graph, const char* op,
                                 const std::function<void(fe::graph::Graph&)>& filter) {
  cudnnHandle_t h = cudnn_util::handle();
  // Validation checks the operation's support surface (head sizes, GPU
  // generation, cuDNN version for SDPA): "not supported" there is an answer too.
  if (fe::error_t st = graph.validate(); st.is_bad()) {
    if (st.get_code() == fe::error_code_t::GRAPH_NOT_SUPPORTED) return st.get_message();
    check(st, op, "graph validation");
  }
  check(graph.build_operation_graph(h), op, "building the operation graph");
  check(graph.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), op,
        "creating execution plans");
  if (filter) filter(graph);
  // No supported engine is an answer, not a failure: the caller falls back.
  if (fe::error_t st = graph.check_support(h); st.is_bad()) return st.get_message();
  if (fe::error_t st = graph.build_plans(h, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE); st.is_bad())
    return st.get_message();
  return std::nullopt;
}

void execute(const fe::graph::Graph& graph, std::unordered_map<int64_t, void*>& by_uid,
             const Tensor& like, const char* op) {
  int64_t bytes = 0;
  check(graph.get_workspace_size(bytes), op, "querying the workspace size");
  Tensor ws;
  if (bytes > 0) ws = Tensor::empty({bytes}, TensorOptions(DType::u8).device(like.device()));
  check(graph.execute(cudnn_util::handle(), by_uid, bytes > 0 ? ws.data_ptr() : nullptr), op,
        "execution");
}

}  // namespace ddp::nn::cudnn_graph

#endif  // DDP_HAVE_CUDNN
