#pragma once
// Internal: CudaDeviceGuard, for the CUDA sources. No CUDA types appear
// here, so any .cpp may include it.

namespace ddp {

// RAII: makes `device` the calling thread's current CUDA device and restores the
// previous one. Does nothing when it already is. Throws CudaError/DeviceError
// (DeviceError in a build without CUDA).
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int prev_ = -1;  // -1: nothing to restore
};

}  // namespace ddp
