// See src/optim/foreach.h: the stand-ins of a build without CUDA. No CUDA
// tensor can exist there, so these are never reached; they raise
// DeviceError rather than leave the symbols undefined.

#include "ddp/core/error.h"
#include "optim/foreach.h"

namespace ddp::optim::multi_tensor::cuda_impl {

namespace {
[[noreturn]] void unavailable(const char* op) {
  DDP_THROW(DeviceError, "{}: libddp was built without CUDA", op);
}
}  // namespace

void sgd_step(const Tensors&, const Tensors&, const Tensors&, const std::vector<uint8_t>&,
              const kernels::SgdScalars&) {
  unavailable("foreach sgd_step");
}
void adamw_step(const Tensors&, const Tensors&, const Tensors&, const Tensors&, const Tensors&,
                const std::vector<kernels::AdamWTensorScalars>&, const kernels::AdamWScalars&) {
  unavailable("foreach adamw_step");
}
double pow_sum(const Tensors&, double) { unavailable("foreach pow_sum"); }
bool mul_(const Tensors&, double, bool) { unavailable("foreach mul_"); }

}  // namespace ddp::optim::multi_tensor::cuda_impl
