// See src/nn/functional/dense_cuda.h: the stand-ins of a build without
// CUDA. No CUDA tensor can exist there, so these are never reached; they
// raise DeviceError rather than leave the symbols undefined.

#include "ddp/core/error.h"
#include "nn/functional/dense_cuda.h"

namespace ddp::nn::functional::dense_cuda {

namespace {
[[noreturn]] void unavailable(const char* op) {
  DDP_THROW(DeviceError, "{}: libddp was built without CUDA", op);
}
}  // namespace

void layer_norm_forward(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&,
                        const Tensor&, const Tensor&) {
  unavailable("layer_norm");
}
void layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, const Tensor&) {
  unavailable("layer_norm_backward");
}
void gelu_erf(const Tensor&, const Tensor&) { unavailable("gelu"); }
void gelu_erf_backward(const Tensor&, const Tensor&, const Tensor&) {
  unavailable("gelu_backward");
}
bool linear_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  unavailable("linear");
}

}  // namespace ddp::nn::functional::dense_cuda
