#pragma once
// Internal: timing-disabled CUDA events of a device from a per-device free
// list, for ordering work (the allocators use them; so may the backends and
// process groups). Events travel as void* (cudaEvent_t), so any .cpp may
// include this.

namespace ddp {

void* acquire_cuda_event(int device);
void release_cuda_event(int device, void* event);  // noexcept in practice: logs errors

}  // namespace ddp
