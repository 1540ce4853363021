// ddp/runtime_versions.h in a build without CUDA: no components, no GPUs,
// and the reason says so.

#include "ddp/runtime_versions.h"

namespace ddp::detail {

void add_cuda_runtime_versions(RuntimeVersions& out) {
  out.cuda_compiled = false;
  out.cuda_available = false;
  out.unavailable_reason = "libddp was built without CUDA";
}

}  // namespace ddp::detail
