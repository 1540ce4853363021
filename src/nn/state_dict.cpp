// Module::state_dict() and Module::load_state_dict(): the names and order of
// a module's persistent state, and loading values into it in place.

#include <string>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/module.h"

namespace ddp::nn {

namespace {

// A list of keys for an error message; a very long one is cut, since a
// state dict of the wrong model can mismatch in hundreds of keys.
std::string key_list(const std::vector<std::string>& keys) {
  constexpr size_t kMaxShown = 50;
  std::string out = "[";
  for (size_t i = 0; i < keys.size() && i < kMaxShown; ++i) out += (i ? ", " : "") + keys[i];
  if (keys.size() > kMaxShown) out += fmt::format(", ... and {} more", keys.size() - kMaxShown);
  return out + "]";
}

}  // namespace

TensorDict Module::state_dict() const {
  TensorDict out;
  // No deduplication: a tied weight is saved under each of its names, as
  // PyTorch does, so a state dict loads into a module built either way.
  for (const auto& [name, t] :
       collect({.params = true, .buffers = true, .dedup = false, .persistent_only = true}))
    out.insert(name, t.detach());
  return out;
}

// Note [Loading a state dict]
// Everything is checked first and copied afterwards, so a failing load
// leaves the module as it was; the message lists all problems at once (a
// user fixing a checkpoint wants every renamed key, not the first). Values
// are copied into the registered tensors (see Note [Parameter identity]),
// cast to their dtype and device: an f16 checkpoint loads into an f32 model
// on a GPU. A shape mismatch is an error even when not strict, as in
// PyTorch: a silently skipped weight is a bug.
LoadResult Module::load_state_dict(const TensorDict& state, bool strict) {
  TensorDict own =
      collect({.params = true, .buffers = true, .dedup = false, .persistent_only = true});
  LoadResult result;
  std::vector<std::string> mismatched, undefined;
  for (const auto& [name, t] : own) {
    const Tensor* src = state.find(name);
    if (!src) {
      result.missing_keys.push_back(name);
    } else if (!src->defined()) {
      undefined.push_back(name);
    } else if (src->shape() != t.shape()) {
      mismatched.push_back(fmt::format("{}: {} in the module, {} in the state dict", name,
                                       shape_str(t.shape()), shape_str(src->shape())));
    }
  }
  for (const auto& [name, t] : state)
    if (!own.contains(name)) result.unexpected_keys.push_back(name);

  bool key_errors = strict && !result.ok();
  if (key_errors || !mismatched.empty() || !undefined.empty()) {
    std::vector<std::string> parts;
    if (strict && !result.missing_keys.empty())
      parts.push_back(fmt::format("missing keys ({}): {}", result.missing_keys.size(),
                                  key_list(result.missing_keys)));
    if (strict && !result.unexpected_keys.empty())
      parts.push_back(fmt::format("unexpected keys ({}): {}", result.unexpected_keys.size(),
                                  key_list(result.unexpected_keys)));
    if (!mismatched.empty())
      parts.push_back(
          fmt::format("shape mismatches ({}): {}", mismatched.size(), key_list(mismatched)));
    if (!undefined.empty())
      parts.push_back(
          fmt::format("undefined tensors ({}): {}", undefined.size(), key_list(undefined)));
    std::string msg = fmt::format("{}: load_state_dict: {}; nothing was loaded", describe(),
                                  fmt::join(parts, "; "));
    if (!mismatched.empty()) DDP_THROW(ShapeError, "{}", msg);
    DDP_THROW(ValueError, "{}", msg);
  }

  NoGradGuard no_grad;
  for (const auto& [name, t] : own)
    if (const Tensor* src = state.find(name)) Tensor(t).copy_(*src);
  return result;
}

}  // namespace ddp::nn
