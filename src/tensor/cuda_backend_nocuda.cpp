// Build without CUDA: there is no CUDA backend; backend_for(CUDA) raises DeviceError.
#include "ddp/tensor/backend.h"

namespace ddp {
Backend* cuda_backend() { return nullptr; }
}  // namespace ddp
