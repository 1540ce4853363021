// See kernels/cuda/cudnn_graph.h and Note [cuDNN graph API] there.

#include "ddp/config.h"

#if DDP_HAVE_CUDNN

#include "cuda/cudnn_graph.h"

#include <fmt/format.h>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "cuda/cudnn_policy.h"

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

namespace {

// The heuristics' choice: build() built candidates in heuristic order and
// stopped at the first that built, and execute() only ever builds later
// ones, so it is the first built plan. (The graph's own "candidate" moves to
// whichever plan was built last, so it is not asked.)
int64_t first_built_plan(const fe::graph::Graph& graph, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    int64_t bytes = 0;
    if (graph.get_workspace_size_plan_at_index(i, bytes).is_good()) return i;
  }
  return -1;
}

}  // namespace

void execute(fe::graph::Graph& graph, std::unordered_map<int64_t, void*>& by_uid,
             const Tensor& like, const char* op) {
  const int64_t count = graph.get_execution_plan_count();
  const int64_t primary = first_built_plan(graph, count);
  if (primary < 0) DDP_THROW(CudnnError, "{}: execution of a graph with no built plan", op);
  // See Note [cuDNN workspace fallback] in kernels/cuda/cudnn_policy.h.
  Tensor ws;
  std::string oom;  // the allocator's last message
  auto workspace_of = [&](int64_t i) -> std::optional<int64_t> {
    int64_t bytes = 0;
    if (graph.get_workspace_size_plan_at_index(i, bytes).is_good()) return bytes;
    if (i == primary || graph.build_plan_at_index(i).is_bad()) return std::nullopt;
    if (graph.get_workspace_size_plan_at_index(i, bytes).is_bad()) return std::nullopt;
    return bytes;
  };
  auto try_allocate = [&](int64_t bytes) {
    if (bytes > cudnn_policy::workspace_limit()) {
      oom = fmt::format("refused by cudnn_policy::ScopedWorkspaceLimit({})",
                        cudnn_policy::workspace_limit());
      return false;
    }
    try {
      ws = Tensor::empty({bytes}, TensorOptions(DType::u8).device(like.device()));
      return true;
    } catch (const OutOfMemoryError& e) {
      oom = e.what();
      return false;
    }
  };
  const cudnn_policy::WorkspaceChoice choice =
      cudnn_policy::choose_plan(primary, count, workspace_of, try_allocate);
  if (choice.index < 0)
    DDP_THROW(OutOfMemoryError, "{}: {}; the allocator's last answer: {}", op,
              cudnn_policy::describe(choice), oom);
  if (choice.index != primary)
    DDP_LOG_DEBUG("{}: workspace fallback: plan {} instead of plan {} ({})", op, choice.index,
                  primary, cudnn_policy::describe(choice));
  check(graph.execute_plan_at_index(cudnn_util::handle(), by_uid,
                                    ws.defined() ? ws.data_ptr() : nullptr, choice.index),
        op, "execution");
}

}  // namespace ddp::nn::cudnn_graph

#endif  // DDP_HAVE_CUDNN
