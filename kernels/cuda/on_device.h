#pragma once
// For the CUDA sources: the one conversion from ddp::cuda::Stream (what every
// launcher takes) to the runtime's cudaStream_t, and OnDevice, which makes a
// tensor's device current for a kernel call and picks that device's current
// stream (Note [Current stream] in src/tensor/runtime_cuda.cpp).

#include <cuda_runtime.h>

#include "ddp/tensor/cuda.h"
#include "ddp/tensor/tensor.h"
#include "tensor/device_guard.h"

namespace ddp::cuda_kernels {

inline cudaStream_t native(const cuda::Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

struct OnDevice {
  CudaDeviceGuard guard;
  cuda::Stream stream;
  explicit OnDevice(const Tensor& t)
      : guard(t.device().index), stream(cuda::current_stream(t.device().index)) {}
};

}  // namespace ddp::cuda_kernels
