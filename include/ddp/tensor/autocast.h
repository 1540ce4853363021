#pragma once
// Autocast: a scope in which the ops that gain from it (matmul, linear,
// conv2d, attention) run in a lower precision, bf16 or f16, while the
// numerically sensitive ones (softmax, losses, normalisation statistics,
// reductions, exp/log/pow) run in f32, like torch.autocast. The model's
// parameters stay f32 ("master weights"): an op casts its inputs on the way
// in, and those casts are differentiable, so gradients reach the parameters
// in f32.
//
//   {
//     amp::Autocast autocast(DeviceType::CUDA, DType::bf16);
//     Tensor loss = F::cross_entropy(model.forward(x), y);  // loss is f32
//   }
//   loss.backward();  // outside the scope, as torch recommends
//
// Which op does what is one table, printed in docs/amp.md and readable here
// through autocast_policy_table(); see Note [Autocast policy] in
// src/tensor/autocast_policy.h.
//
// Note [Autocast state]
// The state is thread-local and kept per device type (CPU, CUDA), like
// torch's: a scope on one thread never changes what ops do on another, and
// two models trained on two threads of one process cannot trip over each
// other. An op consults the state of the device its inputs live on, so a
// CUDA scope leaves CPU ops alone and vice versa. Scopes nest: an inner
// scope may change the dtype or disable autocast (enabled = false), and its
// destructor restores what the enclosing scope had. Both CPU and CUDA are
// supported with bf16 and f16: the CPU kernels compute 16-bit inputs in f32
// and round once (Note [Compute type]), so CPU autocast is slower than f32
// but behaves exactly like CUDA's and lets the whole feature be tested
// without a GPU. Worker threads (a DataLoader's, the DDP engine's) start
// with autocast off, as torch's do.

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "ddp/core/device.h"
#include "ddp/core/dtype.h"

namespace ddp::amp {

// RAII autocast scope for one device type on the calling thread.
class Autocast {
 public:
  // dtype must be bf16 or f16 (ValueError otherwise, even when disabled);
  // nullopt keeps the dtype the enclosing scope set for this device type,
  // or the default (f16 for CUDA, bf16 for CPU, as in torch). enabled =
  // false turns autocast off for this device type until the scope ends.
  explicit Autocast(DeviceType device_type, std::optional<DType> dtype = std::nullopt,
                    bool enabled = true);
  // The device's type; the index plays no part (as in torch).
  explicit Autocast(Device device, std::optional<DType> dtype = std::nullopt, bool enabled = true)
      : Autocast(device.type, dtype, enabled) {}
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DeviceType device_type_;
  bool prev_enabled_;
  DType prev_dtype_;
};

// Whether autocast is on for ops on device_type on the calling thread.
bool is_autocast_enabled(DeviceType device_type);
// The low-precision dtype ops on device_type use when autocast is on: the
// innermost scope's, or the default (f16 CUDA, bf16 CPU) outside any scope.
DType autocast_dtype(DeviceType device_type);

// ---- the policy table ----------------------------------------------------

// What autocast does to an op's floating inputs (on an enabled device):
//   lower_precision: cast to the scope's dtype (bf16/f16); f64 is left alone.
//   f32:             cast f16/bf16 to f32; f32 and f64 are left alone.
//   promote:         cast all to the widest floating dtype among them.
// keep_input: the first input (the activation) keeps its dtype and the
// others (weight, bias) are cast to f32, for ops that compute in f32
// internally and write the input's dtype (batch_norm, as cuDNN does).
enum class CastPolicy : uint8_t { lower_precision, f32, promote, keep_input };
// "lower_precision", "f32", "promote", "keep_input"
const char* policy_name(CastPolicy policy);

struct AutocastPolicyEntry {
  const char* op;  // the op's name as in ops.h / nn::functional
  CastPolicy policy;
};
// Every op that consults autocast, in table order.
std::span<const AutocastPolicyEntry> autocast_policy_table();
// The policy of the op named `op`; nullopt for an op autocast leaves alone
// (it then runs in its inputs' dtype, e.g. relu, gelu, add).
std::optional<CastPolicy> autocast_policy(std::string_view op);

// ---- the weight-cast cache -----------------------------------------------

// Note [Autocast weight cache]
// Within a scope, the low-precision copy of a leaf f32 tensor that requires
// grad (a parameter) is made once and reused, so a weight used by several
// ops, or by every step of an unrolled loop, is converted once. The cache is
// thread-local and emptied when the outermost scope on the thread exits (or
// by clear_autocast_cache()). So the scope must not span an optimizer step
// that updates the weights in place: wrap the forward pass and the loss,
// as torch recommends. Each use gets its own small autograd node leading
// back to the f32 parameter, so the cached copy survives a backward that
// frees the graph, and gradient accumulation inside one scope works.
struct AutocastCacheStats {
  int64_t entries = 0;  // cached copies now held by this thread
  int64_t hits = 0;     // uses served from the cache (since the thread started)
  int64_t misses = 0;   // copies made (since the thread started)
};
AutocastCacheStats autocast_cache_stats();
void clear_autocast_cache();

}  // namespace ddp::amp
