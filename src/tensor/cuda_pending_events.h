#pragma once
// Draining the events that guard freed blocks, shared by the device caching
// allocator and the pinned host cache (internal; needs the CUDA headers).

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "tensor/cuda_event_pool.h"

namespace ddp {

// Each Pending has `cudaEvent_t event` and `int device`. Events that have
// completed (with wait: after cudaEventSynchronize) go back to the event pool
// and their entry is passed to on_done, then dropped; the others stay queued.
// A failing event also stays queued (its block is not provably idle); the
// first such error is returned for the caller to raise with its own context.
template <class Pending, class OnDone>
cudaError_t drain_pending_events(std::vector<Pending>& pending, bool wait, OnDone on_done) {
  cudaError_t failure = cudaSuccess;
  size_t keep = 0;
  for (size_t i = 0; i < pending.size(); ++i) {
    const Pending p = pending[i];
    cudaError_t err = wait ? cudaEventSynchronize(p.event) : cudaEventQuery(p.event);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      if (err != cudaErrorNotReady && failure == cudaSuccess) failure = err;
      pending[keep++] = p;
      continue;
    }
    release_cuda_event(p.device, p.event);
    on_done(p);
  }
  pending.resize(keep);
  return failure;
}

}  // namespace ddp
