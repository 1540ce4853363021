#pragma once
// What this process actually runs on: the versions of the CUDA runtime and
// driver, cuBLAS, cuDNN and NCCL that were loaded (which may differ from the
// headers libddp was compiled against, e.g. when cuDNN comes from a pip
// wheel), the files they were loaded from, and the GPUs. The analogue of
// torch.version.cuda / torch.backends.cudnn.version() /
// torch.cuda.nccl.version() in one call; tools/ddp_info prints it.
//
// Never throws for a missing GPU or driver: a CPU-only build says
// "built without CUDA", a CUDA build on a machine without a usable GPU lists
// the libraries and gives the reason there is no GPU.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

struct ComponentVersion {
  std::string name;    // "CUDA runtime", "CUDA driver", "cuBLAS", "cuDNN", "NCCL"
  std::string loaded;  // version this process uses ("13.0.88"); "" when none is loaded
  std::string built;   // version of the headers libddp was compiled with; "" for the driver
  std::string path;    // the shared library it was loaded from; "" when unknown
};

struct GpuInfo {
  int index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int compute_major = 0, compute_minor = 0;
  size_t total_memory_bytes = 0;
  size_t free_memory_bytes = 0;
};

struct RuntimeVersions {
  std::string libddp;            // DDP_VERSION_STRING
  bool cuda_compiled = false;    // built with CUDA
  bool cuda_available = false;   // and a usable GPU is present
  std::string unavailable_reason;  // why not ("" when available)
  std::vector<ComponentVersion> components;  // empty in a CPU-only build
  std::vector<GpuInfo> gpus;                 // empty without a usable GPU

  // The component called `name`, or nullptr.
  const ComponentVersion* find(std::string_view name) const;
  // One "key: value" line each; the first line names libddp and the build.
  std::string str() const;
  // The same as a Markdown table (| what | loaded | built with | from |).
  std::string markdown() const;
};

RuntimeVersions runtime_versions();

}  // namespace ddp
