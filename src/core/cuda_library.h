#pragma once
// Opening libddp_cuda.so, the half of a CUDA build that links the CUDA
// libraries, when something first needs it (Note [Loading CUDA when first
// used] in src/tensor/cuda_runtime.h). In a build without CUDA nothing is
// ever opened and every answer says so.

#include <string>

namespace ddp::detail {

// Why CUDA is unavailable in a build without it: every answer's words.
inline constexpr const char* kBuiltWithoutCuda = "libddp was built without CUDA";

// Whether the NVIDIA driver (libcuda.so.1) can be opened; why not in *why.
// Opens nothing else, so a machine without a GPU maps no CUDA library.
bool cuda_driver_present(std::string* why);

// libddp_cuda.so, from the directory libddp.so was loaded from, opened on
// the first call (thread-safe); false, with the reason in *why, when it
// cannot be (or in a build without CUDA). Its static initialisers register
// its kernels and backends as it opens.
bool open_cuda_library(std::string* why = nullptr);

// A symbol of libddp_cuda.so, opening it first; nullptr when it cannot be
// opened or lacks the symbol (the reason in *why).
void* cuda_library_symbol(const char* name, std::string* why = nullptr);

}  // namespace ddp::detail
