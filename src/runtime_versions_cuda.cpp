// ddp/runtime_versions.h in a CUDA build: asks each loaded library for its
// own version (not the header macros, which only say what libddp was
// compiled against) and dladdr for the file it came from.
//
// Note [Loaded versus built-with versions]
// A CUDA build can run against other copies of the libraries than the ones
// it was compiled with: cuDNN and NCCL from PyTorch's pip wheels
// (site-packages/nvidia/cudnn/lib, found through the RPATH or
// LD_LIBRARY_PATH), a newer driver, a cuBLAS from another toolkit. A GPU
// report must name what actually ran, so every "loaded" field comes from
// a run-time query of the library (cudaRuntimeGetVersion, cublasGetProperty,
// cudnnGetProperty, ncclGetVersion), every "built" field from its header,
// and a mismatch is shown rather than hidden. None of the queries needs a
// GPU, so the report is complete on a machine without one except for the
// driver and the GPU list.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <link.h>

#include <fmt/format.h>

#include <string>

#include "ddp/config.h"
#include "ddp/runtime_versions.h"
#include "ddp/tensor/cuda.h"

#if DDP_HAVE_CUDNN
#include <cudnn.h>
#endif
#if DDP_HAVE_NCCL
#include <nccl.h>
#endif

namespace ddp::detail {

namespace {

// The shared object that defines `symbol`, or "".
std::string library_of(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// The first loaded shared object whose path contains `needle` (e.g. the
// driver's libcuda.so.1, which the runtime opens with dlopen), or "".
std::string loaded_library_containing(const char* needle) {
  struct Search {
    const char* needle;
    std::string found;
  } search{needle, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name && std::string_view(info->dlpi_name).find(s->needle) != std::string_view::npos) {
          s->found = info->dlpi_name;
          return 1;
        }
        return 0;
      },
      &search);
  return search.found;
}

// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version_string(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

ComponentVersion cuda_runtime() {
  ComponentVersion c{"CUDA runtime", "", cuda_version_string(CUDART_VERSION), ""};
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) c.loaded = cuda_version_string(v);
  c.path = library_of(reinterpret_cast<const void*>(&cudaRuntimeGetVersion));
  return c;
}

ComponentVersion cuda_driver() {
  // The newest CUDA version the installed driver supports; 0 without a driver.
  ComponentVersion c{"CUDA driver", "", "", ""};
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) c.loaded = cuda_version_string(v);
  (void)cudaGetLastError();
  c.path = loaded_library_containing("libcuda.so");
  return c;
}

// A library that reports its version through GetProperty(MAJOR_VERSION,
// MINOR_VERSION, PATCH_LEVEL): the loaded "major.minor.patch" (empty when a
// query fails) and the file that holds `get`.
template <class Status>
ComponentVersion from_properties(const char* name, std::string built,
                                 Status (*get)(libraryPropertyType, int*), Status ok) {
  ComponentVersion c{name, "", std::move(built), ""};
  int v[3] = {0, 0, 0};
  const libraryPropertyType kinds[3] = {MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL};
  bool all = true;
  for (int i = 0; i < 3 && all; ++i) all = get(kinds[i], &v[i]) == ok;
  if (all) c.loaded = fmt::format("{}.{}.{}", v[0], v[1], v[2]);
  c.path = library_of(reinterpret_cast<const void*>(get));
  return c;
}

std::string cublas_built() {
  return fmt::format("{}.{}.{}", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
}

ComponentVersion cublas() {
  return from_properties("cuBLAS", cublas_built(), &cublasGetProperty, CUBLAS_STATUS_SUCCESS);
}

ComponentVersion cublas_lt() {
  return from_properties("cuBLASLt", cublas_built(), &cublasLtGetProperty, CUBLAS_STATUS_SUCCESS);
}

#if DDP_HAVE_CUDNN
ComponentVersion cudnn() {
  return from_properties("cuDNN", fmt::format("{}.{}.{}", CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL),
                         &cudnnGetProperty, CUDNN_STATUS_SUCCESS);
}
#endif

#if DDP_HAVE_NCCL
ComponentVersion nccl() {
  ComponentVersion c{"NCCL", "", "", ""};
  c.built = fmt::format("{}.{}.{}", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  int code = 0;
  // NCCL >= 2.9 encodes 10000 * major + 100 * minor + patch.
  if (ncclGetVersion(&code) == ncclSuccess && code > 0)
    c.loaded = fmt::format("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100);
  c.path = library_of(reinterpret_cast<const void*>(&ncclGetVersion));
  return c;
}
#endif

GpuInfo gpu(int index) {
  GpuInfo g;
  g.index = index;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) == cudaSuccess) {
    g.name = prop.name;
    g.compute_major = prop.major;
    g.compute_minor = prop.minor;
    g.total_memory_bytes = prop.totalGlobalMem;
  }
  // cudaMemGetInfo answers for the current device: switch for the call.
  int previous = 0;
  if (cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(index) == cudaSuccess) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) g.free_memory_bytes = free_bytes;
    cudaSetDevice(previous);
  }
  (void)cudaGetLastError();
  return g;
}

}  // namespace

// Looked up by name from libddp.so (Note [Loading CUDA when first used] in
// src/tensor/cuda_runtime.h).
extern "C" void ddp_add_cuda_runtime_versions(RuntimeVersions& out) {
  out.cuda_compiled = true;
  out.components = {cuda_runtime(), cuda_driver(), cublas(), cublas_lt()};
#if DDP_HAVE_CUDNN
  out.components.push_back(cudnn());
#endif
#if DDP_HAVE_NCCL
  out.components.push_back(nccl());
#endif
  out.cuda_available = cuda::is_available();
  out.unavailable_reason = out.cuda_available ? "" : cuda::unavailable_reason();
  for (int i = 0; i < cuda::device_count(); ++i) out.gpus.push_back(gpu(i));
  // The driver is loaded by the first runtime call; look for it again now.
  if (ComponentVersion* d = &out.components[1]; d->path.empty())
    d->path = loaded_library_containing("libcuda.so");
}

}  // namespace ddp::detail
