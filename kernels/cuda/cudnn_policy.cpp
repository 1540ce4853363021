// See kernels/cuda/cudnn_policy.h: Note [cuDNN pointer alignment] and Note [cuDNN
// workspace fallback]. Built in every configuration (no cuDNN include).

#include "cuda/cudnn_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "core/format_bytes.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/core/error.h"
#include "ddp/tensor/memory_format.h"
#include "ddp/tensor/ops.h"

namespace ddp::nn::cudnn_policy {

bool is_aligned(const void* p, int64_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % uintptr_t(alignment) == 0;
}

bool is_aligned(const Tensor& t, int64_t alignment) {
  return !t.defined() || t.numel() == 0 || is_aligned(t.data_ptr(), alignment);
}

Tensor empty_dense_like(const Tensor& t) {
  if (is_channels_last(t))
    return empty_nchw(t.shape(), t.dtype(), t.device(), /*channels_last=*/true);
  return Tensor::empty(t.shape(), TensorOptions(t.dtype()).device(t.device()));
}

Tensor AlignedOperands::input(const Tensor& t) {
  if (is_aligned(t)) return t;
  autograd::NoGradGuard no_grad;
  Tensor copy = empty_dense_like(t);
  copy.copy_(t.detach());
  ++staged_;
  return copy;
}

Tensor AlignedOperands::output(const Tensor& t) {
  if (is_aligned(t)) return t;
  Tensor scratch = empty_dense_like(t);
  outputs_.emplace_back(t, scratch);
  ++staged_;
  return scratch;
}

void AlignedOperands::finish() {
  autograd::NoGradGuard no_grad;
  for (auto& [caller, scratch] : outputs_) Tensor(caller).copy_(scratch);
  outputs_.clear();
}

WorkspaceChoice choose_plan(int64_t primary, int64_t count,
                            const std::function<std::optional<int64_t>(int64_t)>& workspace_of,
                            const std::function<bool(int64_t)>& try_allocate) {
  DDP_CHECK(primary >= 0 && primary < count, "cuDNN plan choice: first choice {} of {} plans",
            primary, count);
  WorkspaceChoice c;
  int64_t smallest_failed = std::numeric_limits<int64_t>::max();
  for (int64_t i = primary; i < count; ++i) {
    std::optional<int64_t> bytes = workspace_of(i);
    if (!bytes) {
      DDP_CHECK(i != primary, "cuDNN plan choice: the first choice (plan {}) is not built", i);
      ++c.unbuildable;
      continue;
    }
    if (*bytes >= smallest_failed) {
      ++c.too_large;
      continue;
    }
    if (*bytes == 0 || try_allocate(*bytes)) {
      c.index = i;
      return c;
    }
    c.failed.push_back({i, *bytes});
    smallest_failed = std::min(smallest_failed, *bytes);
  }
  return c;
}

namespace {
thread_local int64_t t_workspace_limit = std::numeric_limits<int64_t>::max();
}

ScopedWorkspaceLimit::ScopedWorkspaceLimit(int64_t bytes)
    : previous_(std::exchange(t_workspace_limit, bytes)) {}
ScopedWorkspaceLimit::~ScopedWorkspaceLimit() { t_workspace_limit = previous_; }
int64_t workspace_limit() { return t_workspace_limit; }

std::string describe(const WorkspaceChoice& c) {
  std::string out = "no plan's workspace fits in the memory left:";
  for (size_t k = 0; k < c.failed.size(); ++k)
    out += fmt::format("{} plan {} needs {}", k == 0 ? "" : ",", c.failed[k].index,
                       format_bytes(size_t(c.failed[k].bytes)));
  out += " (out of memory)";
  if (c.unbuildable > 0) out += fmt::format("; {} later plan(s) could not be built", c.unbuildable);
  if (c.too_large > 0)
    out +=
        fmt::format("; {} later plan(s) need at least as much as a size that failed", c.too_large);
  return out;
}

BiasPath conv_bias_path(bool has_bias, bool fused_graph_has_engine) {
  if (!has_bias) return BiasPath::none;
  return fused_graph_has_engine ? BiasPath::in_graph : BiasPath::added_after;
}

Tensor conv_bias_grad(const Tensor& dy) {
  DDP_CHECK(dy.defined() && dy.dim() >= 2,
            "conv2d bias gradient: dy must have a channel dim, got {}",
            dy.defined() ? dy.describe() : "an undefined tensor");
  autograd::NoGradGuard no_grad;
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < dy.dim(); ++d) dims.push_back(d);
  // sum() of a floating tensor accumulates in compute_t (f32 for f16/bf16,
  // f64 for f64) and rounds once into dy's dtype on both backends.
  return sum(dy.detach(), dims);
}

}  // namespace ddp::nn::cudnn_policy
