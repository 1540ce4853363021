#include "ddp/tensor/backend.h"

#include "ddp/tensor/cuda.h"

namespace ddp {

void Backend::copy_from_host(const void*, const Tensor& dst, bool) {
  DDP_THROW(NotImplementedError, "copy_from_host: not supported by the {} backend",
            dst.device().str());
}

void Backend::copy_to_host(const Tensor& src, void*, bool) {
  DDP_THROW(NotImplementedError, "copy_to_host: not supported by the {} backend",
            src.device().str());
}

void Backend::reduce_cols(ReductionOp op, const Tensor& in, const Tensor& out) {
  const Tensor rows = in.transpose(0, 1).contiguous();
  if (rows.shape()[1] == 0) {
    fill(out, 0.0);  // an empty sum, which reduce_rows leaves to the caller
    return;
  }
  reduce_rows(op, rows, out);
}

namespace {
// Filled by the registrars while libddp loads (constant-initialised, so
// their order does not matter).
constinit BackendGetter g_backends[kNumDeviceTypes] = {};
}  // namespace

BackendRegistrar::BackendRegistrar(DeviceType type, BackendGetter getter) {
  g_backends[int(type)] = getter;
}

Backend* cuda_backend() {
  BackendGetter g = g_backends[int(DeviceType::CUDA)];
  return g ? &g() : nullptr;
}

Backend& backend_for(DeviceType type) {
  if (type == DeviceType::CPU) return cpu_backend();
  // Asking first opens libddp_cuda.so when a driver is present, whose
  // registrar fills the CUDA slot (Note [Loading CUDA when first used] in
  // src/tensor/cuda_runtime.h).
  const bool usable = cuda::is_available();
  Backend* cuda = cuda_backend();
  if (!cuda || !usable)
    DDP_THROW(DeviceError, "CUDA tensors need a usable GPU: {}", cuda::unavailable_reason());
  return *cuda;
}

}  // namespace ddp
