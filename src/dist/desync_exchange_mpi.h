#pragma once
// The mpi backend's half of the desync report (Note [Desync report], Note
// [MPI timeouts]). Built only with MPI.

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/flight_recorder.h"

namespace ddp::dist::detail {

// Every rank that failed sends its flight-recorder position to every other
// rank over report_comm (a communicator of its own, so nothing else can match
// these messages) and takes what arrives within min(5 s, timeout) +
// extra_grace; the ranks that send nothing are "busy outside any collective,
// or lost" (there is no store, so no heartbeat). Returns the desync line.
// Buffers of messages that may still be in flight go to keep_alive.
std::string exchange_positions_mpi(MPI_Comm report_comm, int rank, int size,
                                   const FlightRecorder* recorder,
                                   std::chrono::milliseconds timeout,
                                   std::chrono::milliseconds extra_grace,
                                   std::vector<std::shared_ptr<void>>& keep_alive);

}  // namespace ddp::dist::detail
