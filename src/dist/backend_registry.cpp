// The backend registry. See Note [Backend registry] in backend_registry.h.

#include "ddp/dist/backend_registry.h"

#include "core/cuda_library.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "ddp/core/error.h"

namespace ddp::dist {

namespace {

struct Registry {
  std::mutex mu;
  // Entries are never removed, so pointers handed out stay valid.
  std::map<std::string, std::unique_ptr<BackendInfo>> by_name;
};

// Created on first use, so registrations from other files' static
// initialisers find it whatever their order; leaked, so a lookup during
// static destruction is safe.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

bool BackendInfo::takes(DeviceType t) const {
  return std::find(devices.begin(), devices.end(), t) != devices.end();
}

void register_backend(BackendInfo info) {
  DDP_CHECK_T(ValueError, !info.name.empty() && info.name.find_first_of(":,") == std::string::npos,
              "register_backend: bad backend name '{}' (non-empty, without ':' or ',')", info.name);
  DDP_CHECK_T(ValueError, !info.devices.empty() && info.create && info.unusable,
              "register_backend: backend '{}' needs devices, an unusable test and a factory",
              info.name);
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  DDP_CHECK_T(ValueError, !r.by_name.count(info.name),
              "register_backend: a backend named '{}' is registered already", info.name);
  std::string name = info.name;
  r.by_name.emplace(std::move(name), std::make_unique<BackendInfo>(std::move(info)));
}

namespace {
const BackendInfo* lookup(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : it->second.get();
}
}  // namespace

// nccl registers when libddp_cuda.so opens (Note [Loading CUDA when first
// used] in src/tensor/cuda_runtime.h), so a name not found opens it (never
// under the lock: its registrar takes it) and asks again.
const BackendInfo* find_backend(const std::string& name) {
  if (const BackendInfo* b = lookup(name)) return b;
  return ddp::detail::open_cuda_library() ? lookup(name) : nullptr;
}

std::vector<std::string> registered_backends(bool open_cuda_library) {
  if (open_cuda_library) ddp::detail::open_cuda_library();
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  std::vector<std::string> out;
  for (const auto& [name, info] : r.by_name) out.push_back(name);
  return out;
}

BackendPlan parse_backend_spec(
    const std::string& spec, const char* who,
    const std::function<const BackendInfo&(const std::string&)>& lookup) {
  BackendPlan plan;
  if (spec.find(':') == std::string::npos) {
    for (DeviceType t : lookup(spec).devices) plan[t] = spec;
    return plan;
  }
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, comma - at);
    const size_t colon = item.find(':');
    DDP_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < item.size(),
              "{}: bad backend '{}': '{}' is not DEVICE:BACKEND (expected e.g. "
              "\"cpu:gloo,cuda:nccl\")",
              who, spec, item);
    const std::string dev = item.substr(0, colon), name = item.substr(colon + 1);
    DDP_CHECK(dev == "cpu" || dev == "cuda",
              "{}: bad backend '{}': unknown device type '{}' (cpu or cuda)", who, spec, dev);
    const DeviceType t = dev == "cuda" ? DeviceType::CUDA : DeviceType::CPU;
    DDP_CHECK(!plan.count(t), "{}: bad backend '{}': {} is named twice", who, spec, dev);
    DDP_CHECK_T(DeviceError, lookup(name).takes(t),
                "{}: bad backend '{}': {} does not take {} tensors", who, spec, name, dev);
    plan[t] = name;
    at = comma + 1;
  }
  return plan;
}

}  // namespace ddp::dist
