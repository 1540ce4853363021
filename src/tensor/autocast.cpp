// The autocast scope, its thread-local state, the input casts of the policy
// table and the weight-cast cache. See Note [Autocast state] in
// include/ddp/tensor/autocast.h and Note [Autocast policy] in
// src/tensor/autocast_policy.h.

#include <map>
#include <utility>

#include "tensor/autocast_policy.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/autograd/node.h"
#include "ddp/core/error.h"

namespace ddp::amp {

namespace {

// The default low-precision dtype per device type (indexed by DeviceType),
// torch's choice: f16 on CUDA, whose tensor cores have run it the longest,
// bf16 on the CPU, where f16 has no fast paths at all.
constexpr DType kDefaultDType[kNumDeviceTypes] = {DType::bf16, DType::f16};

struct CacheEntry {
  Tensor master;  // held so its TensorImpl address cannot be reused while cached
  // The storage it was cast from, held so that a new storage (Module::to,
  // Note [Parameter identity]) cannot reuse its address unnoticed.
  Storage master_storage;
  Tensor low;  // the cast copy, without history
};

struct ThreadState {
  bool enabled[kNumDeviceTypes] = {false, false};
  DType dtype[kNumDeviceTypes] = {kDefaultDType[0], kDefaultDType[1]};
  int depth = 0;      // live Autocast scopes on this thread
  int suspended = 0;  // ops running inside autocast_call
  std::map<std::pair<const TensorImpl*, DType>, CacheEntry> cache;
  int64_t hits = 0, misses = 0;

  bool any_enabled() const { return enabled[0] || enabled[1]; }
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

int index_of(DeviceType type) {
  const int i = int(type);
  DDP_CHECK(i >= 0 && i < kNumDeviceTypes, "autocast: unknown device type {}", i);
  return i;
}

bool enabled_for(const Tensor& t) { return state().enabled[int(t.device().type)]; }

// A differentiable use of a cached cast: the copy itself when no gradient
// is needed, else a fresh alias of its storage with a node of its own that
// casts the gradient back to the master's dtype (Note [Autocast weight cache]).
Tensor use_cached(const CacheEntry& e) {
  if (!autograd::needs_grad({e.master})) return e.low;
  const Tensor& low = e.low;
  Tensor alias =
      Tensor::from_storage(low.storage(), low.shape(), low.strides(), low.offset(), low.dtype());
  const DType master_dtype = e.master.dtype();
  autograd::record("autocast_cast", {e.master}, {alias},
                   [master_dtype](const Tensors& g) { return Tensors{g[0].to(master_dtype)}; });
  return alias;
}

// t in the scope's low-precision dtype; parameters go through the cache
// (torch's rule: leaves that require grad, in f32).
Tensor to_lower(const Tensor& t, DType target) {
  const bool cacheable = t.is_leaf() && t.requires_grad() && t.dtype() == DType::f32;
  if (!cacheable) return t.to(target);
  ThreadState& s = state();
  auto key = std::make_pair(static_cast<const TensorImpl*>(t.impl()), target);
  auto it = s.cache.find(key);
  if (it != s.cache.end() && it->second.master_storage.data() == t.storage().data()) {
    ++s.hits;
    return use_cached(it->second);
  }
  ++s.misses;
  CacheEntry e;
  e.master = t;
  e.master_storage = t.storage();
  {
    autograd::NoGradGuard no_grad;
    e.low = t.detach().to(target);
  }
  auto& slot = s.cache[key];
  slot = std::move(e);
  return use_cached(slot);
}

}  // namespace

// ---- the scope ----------------------------------------------------------

Autocast::Autocast(DeviceType device_type, std::optional<DType> dtype, bool enabled)
    : device_type_(device_type) {
  const int i = index_of(device_type);
  ThreadState& s = state();
  DDP_CHECK(!dtype || *dtype == DType::bf16 || *dtype == DType::f16,
            "Autocast: dtype must be bf16 or f16 (the precision the scope lowers to), got {}",
            dtype_name(*dtype));
  prev_enabled_ = s.enabled[i];
  prev_dtype_ = s.dtype[i];
  s.enabled[i] = enabled;
  if (dtype) s.dtype[i] = *dtype;
  ++s.depth;
}

Autocast::~Autocast() {
  ThreadState& s = state();
  const int i = int(device_type_);
  s.enabled[i] = prev_enabled_;
  s.dtype[i] = prev_dtype_;
  // Leaving the outermost scope drops the cached copies (and their memory).
  if (--s.depth == 0) s.cache.clear();
}

bool is_autocast_enabled(DeviceType device_type) { return state().enabled[index_of(device_type)]; }

DType autocast_dtype(DeviceType device_type) { return state().dtype[index_of(device_type)]; }

// ---- the table ----------------------------------------------------------

const char* policy_name(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::lower_precision:
      return "lower_precision";
    case CastPolicy::f32:
      return "f32";
    case CastPolicy::keep_input:
      return "keep_input";
    case CastPolicy::promote:
      break;
  }
  return "promote";
}

std::span<const AutocastPolicyEntry> autocast_policy_table() { return detail::kAutocastPolicy; }

std::optional<CastPolicy> autocast_policy(std::string_view op) {
  const int i = detail::autocast_op_index(op);
  if (i < 0) return std::nullopt;
  return detail::kAutocastPolicy[i].policy;
}

AutocastCacheStats autocast_cache_stats() {
  const ThreadState& s = state();
  return {int64_t(s.cache.size()), s.hits, s.misses};
}

void clear_autocast_cache() { state().cache.clear(); }

// ---- the hook -----------------------------------------------------------

namespace detail {

bool autocast_active() {
  const ThreadState& s = state();
  return s.suspended == 0 && s.any_enabled();
}

SuspendAutocast::SuspendAutocast() { ++state().suspended; }
SuspendAutocast::~SuspendAutocast() { --state().suspended; }

Tensors cast_inputs(AutocastOp op, const Tensors& inputs) {
  const CastPolicy policy = kAutocastPolicy[int(op)].policy;
  Tensors out = inputs;
  auto eligible = [](const Tensor& t) {
    return t.defined() && is_floating(t.dtype()) && enabled_for(t);
  };
  switch (policy) {
    case CastPolicy::lower_precision:
      // f64 is left alone, as torch does: asking for f64 is asking for precision.
      for (Tensor& t : out) {
        if (!eligible(t) || t.dtype() == DType::f64) continue;
        const DType target = state().dtype[int(t.device().type)];
        if (t.dtype() != target) t = to_lower(t, target);
      }
      break;
    case CastPolicy::f32:
      for (Tensor& t : out)
        if (eligible(t) && (t.dtype() == DType::f16 || t.dtype() == DType::bf16))
          t = t.to(DType::f32);
      break;
    case CastPolicy::keep_input:  // the parameters only: out[0] is the activation
      for (size_t i = 1; i < out.size(); ++i)
        if (eligible(out[i]) && (out[i].dtype() == DType::f16 || out[i].dtype() == DType::bf16))
          out[i] = out[i].to(DType::f32);
      break;
    case CastPolicy::promote: {
      std::optional<DType> widest;
      for (const Tensor& t : out)
        if (eligible(t)) widest = widest ? promote_types(*widest, t.dtype()) : t.dtype();
      if (widest)
        for (Tensor& t : out)
          if (eligible(t) && t.dtype() != *widest) t = t.to(*widest);
      break;
    }
  }
  return out;
}

}  // namespace detail

}  // namespace ddp::amp
