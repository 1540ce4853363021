// See kernels/cuda/cudnn_policy.h: Note [cuDNN pointer alignment] and Note [cuDNN
// workspace fallback]. Built in every configuration (no cuDNN include).

#include "cuda/cudnn_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "core/format_bytes.h"
#include "ddp/core/error.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/memory_format.h"

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

// The copies here are Backend copies: a wrapper runs below autograd, and
// an operand it stages may be a view of a tensor that requires grad.
Tensor AlignedOperands::input(const Tensor& t) {
  if (is_aligned(t)) return t;
  Tensor copy = empty_dense_like(t);
  backend_for(t.device()).copy(t, copy);
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
  for (auto& [caller, scratch] : outputs_) backend_for(caller.device()).copy(scratch, caller);
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

Tensor channel_sum(const Tensor& t_in) {
  DDP_CHECK(t_in.defined() && t_in.dim() >= 2 && is_floating(t_in.dtype()),
            "channel_sum: needs a floating tensor with a channel dim, got {}",
            t_in.defined() ? t_in.describe() : "an undefined tensor");
  const Tensor t = t_in.detach();
  const int64_t c = t.size(1), rest = c == 0 ? 0 : t.numel() / c;
  Tensor out = Tensor::empty({c}, TensorOptions(t.dtype()).device(t.device()));
  Backend& be = backend_for(t.device());
  if (rest == 0) {
    be.fill(out, 0.0);  // an empty sum; the kernels would leave out untouched
    return out;
  }
  // Channel-major ([C, rest] rows) when that view is dense; else, when the
  // channel is innermost in memory (NHWC), the columns of [rest, C] as they
  // lie; else a channel-major copy. The same choice as sum()'s.
  std::vector<int64_t> channel_first{1, 0}, channel_last{0};
  for (int64_t d = 2; d < t.dim(); ++d) {
    channel_first.push_back(d);
    channel_last.push_back(d);
  }
  channel_last.push_back(1);
  Tensor rows = t.permute(channel_first);
  if (!rows.is_contiguous()) {
    const Tensor cols = t.permute(channel_last);
    if (cols.is_contiguous()) {
      be.reduce_cols(ReductionOp::sum, cols.view({rest, c}), out);
      return out;
    }
    Tensor dense = Tensor::empty(rows.shape(), TensorOptions(t.dtype()).device(t.device()));
    be.copy(rows, dense);
    rows = dense;
  }
  be.reduce_rows(ReductionOp::sum, rows.view({c, rest}), out);
  return out;
}

Tensor conv_bias_grad(const Tensor& dy) {
  DDP_CHECK(dy.defined() && dy.dim() >= 2,
            "conv2d bias gradient: dy must have a channel dim, got {}",
            dy.defined() ? dy.describe() : "an undefined tensor");
  return channel_sum(dy);
}

}  // namespace ddp::nn::cudnn_policy
