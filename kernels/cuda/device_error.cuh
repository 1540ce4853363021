#pragma once
// Reporting into the device error record from a kernel: Note [Deferred
// device errors] in src/tensor/device_error_cuda.cpp. A kernel that meets a
// bad index calls report_index_error and then skips the element (it never
// reads or writes out of bounds), so the stream stays usable.

#include "common/device_error.h"

namespace ddp::cuda_kernels {

using kernels::DeviceErrorOp;
using kernels::DeviceErrorRecord;

__device__ __forceinline__ void report_index_error(DeviceErrorRecord* rec, DeviceErrorOp op,
                                                   int64_t value, int64_t position, int64_t bound) {
  if (atomicCAS(&rec->state, 0, 1) != 0) return;  // an earlier error is kept
  rec->op = int32_t(op);
  rec->value = value;
  rec->position = position;
  rec->bound = bound;
  __threadfence_system();  // the fields before the state, as the host sees them
  atomicExch(&rec->state, 2);
}

}  // namespace ddp::cuda_kernels
