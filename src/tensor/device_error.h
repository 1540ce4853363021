#pragma once
// Host side of the deferred device errors (Note [Deferred device errors] in
// src/tensor/device_error_cuda.cpp). CUDA builds only.

#include "common/device_error.h"

namespace ddp::detail {

// The record of `device` as kernels address it (mapped pinned memory) and
// its claim counter (device memory), allocated on first use and kept for
// the process's life.
kernels::DeviceErrorSlot device_error_record(int device);

// After a synchronisation that covered `device`'s work: raises the recorded
// error (IndexError naming the op, the value and its position) and clears
// the record, so the next error can be recorded. Cheap when nothing was
// recorded (a read of host memory); does nothing if no kernel ever asked for
// the record. device -1: every device that has a record.
void raise_deferred_device_error(int device);

}  // namespace ddp::detail
