#pragma once
// Reporting into the device error record from a kernel: Note [Deferred
// device errors] in src/tensor/device_error_cuda.cpp. A kernel that meets a
// bad index calls report_index_error and then skips the element (it never
// reads or writes out of bounds), so the stream stays usable.

#include "common/device_error.h"

namespace ddp::cuda_kernels {

using kernels::DeviceErrorOp;
using kernels::DeviceErrorRecord;
using kernels::DeviceErrorSlot;

__device__ __forceinline__ void report_index_error(DeviceErrorSlot slot, DeviceErrorOp op,
                                                   int64_t value, int64_t position, int64_t bound) {
  const int32_t gen = *reinterpret_cast<volatile int32_t*>(&slot.record->generation);
  if (atomicCAS(slot.claim, gen, gen + 1) != gen) return;  // this generation's error is taken
  DeviceErrorRecord* rec = slot.record;
  rec->op = int32_t(op);
  rec->value = value;
  rec->position = position;
  rec->bound = bound;
  __threadfence_system();  // the fields before the state, as the host sees them
  *reinterpret_cast<volatile int32_t*>(&rec->state) = 2;
  __threadfence_system();
}

}  // namespace ddp::cuda_kernels
