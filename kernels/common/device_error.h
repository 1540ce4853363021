#pragma once
// The device error record: what a CUDA kernel writes when it meets a bad
// input it cannot refuse by throwing (an index out of range), read by the
// host at the next synchronisation point. See Note [Deferred device errors]
// in src/tensor/device_error_cuda.cpp. Plain data, shared by host code and
// the kernels (kernels/cuda/device_error.cuh).

#include <cstdint>

namespace ddp::kernels {

// The ops that report through the record; the host names them in the error.
// Append new ops at the end (the numbers are only ever compared in-process).
enum class DeviceErrorOp : int32_t {
  none = 0,
  embedding = 1,
  embedding_backward = 2,
  cross_entropy = 3,
};

inline const char* device_error_op_name(int32_t op) {
  switch (DeviceErrorOp(op)) {
    case DeviceErrorOp::embedding:
      return "embedding";
    case DeviceErrorOp::embedding_backward:
      return "embedding (backward)";
    case DeviceErrorOp::cross_entropy:
      return "cross_entropy";
    case DeviceErrorOp::none:
      break;
  }
  return "a CUDA kernel";
}

// The record, in mapped pinned host memory. state: 0 clear, 2 written. The
// host bumps `generation` each time it clears the record; a failing thread
// claims the record by moving the device-side claim counter from the
// generation it reads to the next one, so one thread per generation writes
// (Note [Deferred device errors]). Only the first error after a check is kept.
struct DeviceErrorRecord {
  int32_t state;
  int32_t op;        // a DeviceErrorOp
  int64_t value;     // the bad index
  int64_t position;  // its position (row-major) in the index tensor
  int64_t bound;     // valid values are [0, bound)
  int32_t generation;
};

// What a kernel gets: the record as the device addresses it, and the claim
// counter in device memory (atomics stay in device memory: atomics on
// mapped host memory are not guaranteed over every link).
struct DeviceErrorSlot {
  DeviceErrorRecord* record;
  int32_t* claim;
};

}  // namespace ddp::kernels
