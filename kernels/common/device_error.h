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

// state: 0 clear, 1 being written by the first failing thread, 2 written.
// Only the first error after a check is kept; later ones find state != 0.
struct DeviceErrorRecord {
  int32_t state;
  int32_t op;        // a DeviceErrorOp
  int64_t value;     // the bad index
  int64_t position;  // its position (row-major) in the index tensor
  int64_t bound;     // valid values are [0, bound)
};

}  // namespace ddp::kernels
