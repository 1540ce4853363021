// ddp/runtime_versions.h: the build-independent part (formatting). The
// CUDA-specific queries live in runtime_versions_cuda.cpp, in libddp_cuda.so,
// which is opened for them (Note [Loading CUDA when first used] in
// src/tensor/cuda_runtime.h): a diagnostic may map the CUDA libraries.

#include "ddp/runtime_versions.h"

#include <fmt/format.h>

#include "core/cuda_library.h"
#include "ddp/config.h"
#include "ddp/version.h"

namespace ddp {

RuntimeVersions runtime_versions() {
  RuntimeVersions v;
  v.libddp = DDP_VERSION_STRING;
  std::string why;
  using Add = void (*)(RuntimeVersions&);
  if (auto add = reinterpret_cast<Add>(detail::cuda_library_symbol("ddp_add_cuda_runtime_versions", &why))) {
    add(v);
  } else {
    v.cuda_compiled = DDP_HAVE_CUDA;
    v.cuda_available = false;
    v.unavailable_reason = why;
  }
  return v;
}

const ComponentVersion* RuntimeVersions::find(std::string_view name) const {
  for (const ComponentVersion& c : components)
    if (c.name == name) return &c;
  return nullptr;
}

namespace {

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

std::string build_kind(const RuntimeVersions& v) {
  return v.cuda_compiled ? "CUDA build" : "CPU-only build (built without CUDA)";
}

std::string gpu_line(const GpuInfo& g) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return fmt::format("{} (compute capability {}.{}, {:.1f} GiB, {:.1f} GiB free)", g.name,
                     g.compute_major, g.compute_minor, double(g.total_memory_bytes) / kGiB,
                     double(g.free_memory_bytes) / kGiB);
}

std::string no_gpu_reason(const RuntimeVersions& v) {
  return v.unavailable_reason.empty() ? std::string("none") : "none (" + v.unavailable_reason + ")";
}

}  // namespace

std::string RuntimeVersions::str() const {
  std::string s = fmt::format("libddp {}: {}\n", libddp, build_kind(*this));
  for (const ComponentVersion& c : components) {
    s += fmt::format("{}: {}", c.name, c.loaded.empty() ? "not loaded" : c.loaded);
    if (!c.built.empty() && c.built != c.loaded) s += fmt::format(" (built with {})", c.built);
    if (!c.path.empty()) s += fmt::format(" from {}", c.path);
    s += '\n';
  }
  if (gpus.empty()) s += fmt::format("GPU: {}\n", no_gpu_reason(*this));
  for (const GpuInfo& g : gpus) s += fmt::format("GPU {}: {}\n", g.index, gpu_line(g));
  return s;
}

std::string RuntimeVersions::markdown() const {
  std::string s = "| what | loaded | built with | from |\n|---|---|---|---|\n";
  s += fmt::format("| libddp | {} | {} | |\n", libddp, build_kind(*this));
  for (const ComponentVersion& c : components)
    s += fmt::format("| {} | {} | {} | {} |\n", c.name, or_dash(c.loaded), or_dash(c.built),
                     c.path.empty() ? "" : "`" + c.path + "`");
  if (gpus.empty()) s += fmt::format("| GPU | {} | | |\n", no_gpu_reason(*this));
  for (const GpuInfo& g : gpus) s += fmt::format("| GPU {} | {} | | |\n", g.index, gpu_line(g));
  return s;
}

}  // namespace ddp
