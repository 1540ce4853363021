#pragma once
// The raw-MPI baseline of the mpi backend (built only with DDP_HAVE_MPI, from
// raw_mpi.cpp): for each collective, the MPI call ProcessGroupMPI makes, on
// the same buffers with the same iteration counts, so that the wrapper's own
// cost (submission, the worker-thread hand-off, Work completion) shows as the
// ratio of the two.
//
// Where the backend converts, the baseline gives MPI what the backend gives
// it: the backend reduces f16/bf16 as f32 (its half-precision wire format),
// so the baseline reduces an f32 buffer of the same element count and the
// ratio includes the backend's conversions; avg is MPI_SUM in both, the
// backend then divides (that pass shows in the ratio too).

#include <memory>
#include <string>

#include "collective.h"
#include "ddp/dist/process_group.h"

namespace bench {

class RawMpiBaseline {
 public:
  // MPI must already be initialised (create_group("mpi") did that). Duplicates
  // MPI_COMM_WORLD: collective over every rank.
  RawMpiBaseline();
  ~RawMpiBaseline();
  RawMpiBaseline(const RawMpiBaseline&) = delete;
  RawMpiBaseline& operator=(const RawMpiBaseline&) = delete;

  // Runs `warmup` untimed calls, then `iters` timed ones, on b's buffers;
  // returns the max over ranks of the average seconds per call, or NaN when
  // a per-rank count does not fit MPI's int (the backend refuses those too).
  double time(Buffers& b, ddp::dist::ReduceOp op, int root, int warmup, int iters);

  // "Open MPI v4.1.4" (the first part of MPI_Get_library_version).
  static std::string library_version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bench
