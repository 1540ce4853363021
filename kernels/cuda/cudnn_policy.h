#pragma once
// The decisions of the cuDNN-backed layers (conv_cuda.cpp,
// batch_norm_cuda.cpp, cudnn_graph_cuda.cpp) that need no GPU to make:
// pointer alignment and the staging of misaligned operands, the order in
// which plans are tried when a workspace does not fit, the path a conv
// bias takes and its gradient. No cuDNN include and built in every
// configuration (cudnn_policy.cpp), so unit tests check these decisions on
// the CPU (tests/nn/cudnn_policy_test.cpp).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/tensor/tensor.h"

namespace ddp::nn::cudnn_policy {

// ---- pointer alignment ----------------------------------------------------------
//
// Note [cuDNN pointer alignment]
// The frontend tells cuDNN that every tensor's data pointer is 16-byte
// aligned (Tensor_attributes' default alignment) unless set_alignment()
// says otherwise, and engines are chosen on that promise: vectorised loads
// and stores that a misaligned pointer breaks (wrong results on sm90,
// misaligned-address faults on sm80). Nothing checks the promise at
// execution (the frontend checks pointers for SDPA operands only). Fresh
// allocations are aligned (the caching allocator's blocks are 512-byte
// aligned), but a view need not be: a slice at an odd offset, a parameter
// that is a view into a flat buffer, a gradient bucket's view.
// Two ways out: key the plan cache on each pointer's real alignment and
// declare it with set_alignment(), or copy misaligned operands to aligned
// memory. libddp copies (like the attention path), because
// - the copy happens only for the rare misaligned call and costs one pass
//   over that operand, while a plan for, say, 2-byte alignment may have no
//   engine at all (most engines need 16-byte vectors) or a slow one, so
//   keying would turn a view offset into a "no engine" error or a silent
//   slowdown of every call with that alignment;
// - one alignment class per key keeps the cache small and the plans the
//   fast ones;
// - outputs need the same care: a misaligned output is computed into
//   aligned scratch and copied into the caller's tensor afterwards, which
//   no alignment attribute could express for the fused engines.
// AlignedOperands does the staging; the graphs keep the default (16).
constexpr int64_t kAlignment = 16;

bool is_aligned(const void* p, int64_t alignment = kAlignment);
// An undefined tensor counts as aligned (nothing is bound).
bool is_aligned(const Tensor& t, int64_t alignment = kAlignment);

// A fresh tensor of t's shape and dtype on t's device, in t's dense layout:
// NHWC-strided when t is a channels-last 4-D tensor, contiguous otherwise.
Tensor empty_dense_like(const Tensor& t);

// The operands of one cuDNN call, made aligned. input(t) is t itself when
// aligned, else an aligned dense copy; output(t) is t itself when aligned,
// else aligned scratch that finish() copies into t. Keys are made from the
// returned tensors, so a copy that changed the strides (a non-dense view)
// finds the plan for the strides cuDNN really sees.
class AlignedOperands {
 public:
  AlignedOperands() = default;
  AlignedOperands(const AlignedOperands&) = delete;
  AlignedOperands& operator=(const AlignedOperands&) = delete;

  Tensor input(const Tensor& t);
  Tensor output(const Tensor& t);
  // Copies every staged output into its caller's tensor. Call after the
  // execution (on the same stream); not called when the execution threw.
  void finish();
  // Operands copied so far (inputs and outputs).
  int64_t staged() const { return staged_; }

 private:
  std::vector<std::pair<Tensor, Tensor>> outputs_;  // (caller's tensor, scratch)
  int64_t staged_ = 0;
};

// ---- workspace fallback -----------------------------------------------------------
//
// Note [cuDNN workspace fallback]
// The heuristics' first choice of plan may want a workspace larger than the
// memory left. Then the later candidates (heuristic order, which is roughly
// fastest first) are tried instead of raising: each is built into the
// graph when first needed (build_plan_at_index), its workspace queried, and
// the first whose workspace can be allocated runs (execute_plan_at_index).
// A plan needing at least as much as an allocation that already failed is
// not tried (the caching allocator has already freed its cache and retried
// once for that size). Only when no plan's workspace fits is an
// OutOfMemoryError raised, naming the plans tried and their sizes. The
// choice is made per call: the first choice is tried again next time, when
// the memory may be there. Candidates before the first choice are never
// tried: the heuristics' choice is the first candidate that builds.
struct PlanWorkspace {
  int64_t index = -1;
  int64_t bytes = 0;
};
struct WorkspaceChoice {
  int64_t index = -1;                 // the plan to run; -1 when no workspace fits
  std::vector<PlanWorkspace> failed;  // allocations that ran out of memory, in order
  int64_t unbuildable = 0;            // later candidates that could not be built
  int64_t too_large = 0;              // later candidates needing >= a failed size
};
// primary: the heuristics' choice; count: the number of candidates.
// workspace_of(i): plan i's workspace in bytes (building it when needed),
// nullopt when plan i cannot be built. try_allocate(bytes): false when the
// allocation ran out of memory (a 0-byte workspace is never allocated).
WorkspaceChoice choose_plan(int64_t primary, int64_t count,
                            const std::function<std::optional<int64_t>(int64_t)>& workspace_of,
                            const std::function<bool(int64_t)>& try_allocate);
// A test and debugging aid: while one is alive, cuDNN workspaces above
// `bytes` requested on this thread are refused as if the memory were not
// there, so the fallback runs without filling the GPU. Thread-local (no
// other thread or model sees it); nests, the innermost limit applies.
class ScopedWorkspaceLimit {
 public:
  explicit ScopedWorkspaceLimit(int64_t bytes);
  ~ScopedWorkspaceLimit();
  ScopedWorkspaceLimit(const ScopedWorkspaceLimit&) = delete;
  ScopedWorkspaceLimit& operator=(const ScopedWorkspaceLimit&) = delete;

 private:
  int64_t previous_;
};
// The calling thread's limit; INT64_MAX when none.
int64_t workspace_limit();

// "no plan's workspace fits: plan 0 needs 1.0 GiB, plan 3 needs 256 MiB
// (out of memory); 2 later plans could not be built, 1 needs at least as
// much" for the error message.
std::string describe(const WorkspaceChoice& c);

// ---- conv bias --------------------------------------------------------------------
//
// How conv2d's forward adds its bias (Note [cuDNN convolution]): inside the
// convolution's graph when an engine takes conv + ADD (one write of y, the
// bias added to the f32 accumulator), else by libddp's broadcast add after
// a plain convolution graph, so a bias never decides whether the
// convolution runs.
enum class BiasPath { none, in_graph, added_after };
BiasPath conv_bias_path(bool has_bias, bool fused_graph_has_engine);

// t [N, C, ...] (floating) summed over every dim but 1, straight on the
// Backend's row and column sums, which accumulate in f32 (f64 for f64) and
// round once to t's dtype (Note [CUDA row reductions], Note [CPU float
// sums]). The rows are arranged as libddp's sum(t, {0, 2, ...}) arranges
// them, so the two agree bit for bit: an NHWC t is reduced in place by the
// column kernel (Note [CUDA column reductions]), any other layout through a
// channel-major copy. Returns [C] in t's dtype, on t's device, recording no
// autograd node. The wrappers' fallbacks use it where they need a
// per-channel sum (they stand below the ops frontend, whose sum() they
// cannot call).
Tensor channel_sum(const Tensor& t);
// The bias gradient of a convolution: channel_sum(dy), in dy's dtype, which
// is the bias's.
Tensor conv_bias_grad(const Tensor& dy);

}  // namespace ddp::nn::cudnn_policy
