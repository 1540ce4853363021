#pragma once
// The process group bench_collectives measures, by backend name.

#include <memory>
#include <string>

#include "ddp/core/error.h"
#include "ddp/dist/process_group.h"

namespace bench {

// Raised by create_group for a backend this build of libddp does not have;
// main reports it like a bad argument (exit status 2).
class BackendUnavailable : public ddp::NotImplementedError {
 public:
  explicit BackendUnavailable(const std::string& msg) : ddp::NotImplementedError(msg) {}
};

// A process group of `backend` ("mpi", "gloo" or "nccl") over every process of
// the job; collective over all of them. Raises BackendUnavailable ("backend
// gloo not available in this build") when the backend is missing, and the
// backend's own ddp::Error when it fails to start.
std::shared_ptr<ddp::dist::ProcessGroup> create_group(const std::string& backend);

}  // namespace bench
