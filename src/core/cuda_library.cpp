// Opening libddp_cuda.so on first use; see src/core/cuda_library.h.

#include "core/cuda_library.h"

#include <dlfcn.h>

#include <filesystem>

#include "ddp/config.h"

namespace ddp::detail {

namespace {

struct Opened {
  void* handle = nullptr;
  std::string error;  // why handle is null
};

std::string dl_error(const char* what) {
  const char* e = dlerror();
  return std::string(what) + ": " + (e ? e : "unknown error");
}

#if DDP_HAVE_CUDA
// Beside libddp.so: where the build and the install both put it.
std::string library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&open_cuda_library), &info) == 0 || !info.dli_fname)
    return "libddp_cuda.so";  // the loader's search path then
  return (std::filesystem::path(info.dli_fname).parent_path() / "libddp_cuda.so").string();
}
#endif

const Opened& opened() {
  static const Opened once = [] {
    Opened o;
#if DDP_HAVE_CUDA
    const std::string path = library_path();
    o.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!o.handle) o.error = dl_error(("cannot open " + path).c_str());
#else
    o.error = kBuiltWithoutCuda;
#endif
    return o;
  }();
  return once;
}

}  // namespace

bool cuda_driver_present(std::string* why) {
#if DDP_HAVE_CUDA
  static const Opened driver = [] {
    Opened o;
    // Kept open: the CUDA runtime opens the same library when it starts.
    o.handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!o.handle) o.error = dl_error("no NVIDIA driver (libcuda.so.1 cannot be opened)");
    return o;
  }();
  if (!driver.handle && why) *why = driver.error;
  return driver.handle != nullptr;
#else
  if (why) *why = kBuiltWithoutCuda;
  return false;
#endif
}

bool open_cuda_library(std::string* why) {
  const Opened& o = opened();
  if (!o.handle && why) *why = o.error;
  return o.handle != nullptr;
}

void* cuda_library_symbol(const char* name, std::string* why) {
  if (!open_cuda_library(why)) return nullptr;
  dlerror();  // clears this thread's last error, so the one below is dlsym's
  void* p = dlsym(opened().handle, name);
  if (!p && why) *why = dl_error(("libddp_cuda.so has no " + std::string(name)).c_str());
  return p;
}

}  // namespace ddp::detail
