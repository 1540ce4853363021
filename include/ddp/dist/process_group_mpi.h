#pragma once
// ProcessGroupMPI: the "mpi" backend over the MPI library (Open MPI), for CPU
// tensors; CUDA tensors are staged through host memory. Only declared here;
// it exists in builds with DDP_HAVE_MPI (ddp/config.h). No MPI header is
// included: MPI types stay in the .cpp (pimpl), so users of libddp need no
// MPI include path.
//
// Use:
//   auto pg = ddp::dist::ProcessGroupMPI::create();   // every rank, same order
//   pg->allreduce({grad})->wait();
//
// See Note [MPI progress] and Note [MPI initialisation and finalisation] in
// src/dist/process_group_mpi.cpp.

#include <chrono>
#include <memory>
#include <string>

#include "ddp/dist/host_process_group.h"

namespace ddp::dist {

// True when this process was started by Open MPI's mpirun/mpiexec (it sets
// OMPI_COMM_WORLD_SIZE), so create() will find a world to join.
bool is_mpi_launch();

class ProcessGroupMPI : public HostProcessGroup {
 public:
  // Initialises MPI when nobody has yet (MPI_THREAD_MULTIPLE), duplicates
  // MPI_COMM_WORLD (so two groups never see each other's messages) and starts
  // the group's worker thread and, under MPI_THREAD_MULTIPLE, the thread that
  // makes its blocking MPI calls (Note [MPI progress]) and one that answers
  // liveness pings for the desync report (Note [MPI liveness] in
  // src/dist/desync_exchange_mpi.h). Collective over MPI_COMM_WORLD: every rank must
  // create its groups in the same order. Raises MpiError when MPI fails or was
  // initialised by someone else with too low a thread level.
  static std::shared_ptr<ProcessGroupMPI> create();

  // Runs what was already submitted (other ranks wait for it, up to the
  // timeout), then frees the communicator. Receives still pending are
  // cancelled and their Works fail. After a timeout it returns at once and
  // leaves the communicator (Note [MPI timeouts] in the .cpp).
  ~ProcessGroupMPI() override;

  std::string backend_name() const override { return "mpi"; }
  // Every wait of the worker honours it (Note [MPI timeouts]); the default
  // is the store default (300 s, DDP_STORE_TIMEOUT_S).
  void set_timeout(std::chrono::milliseconds t) override;

  struct Impl;  // public only so that the .cpp's helpers can name it

 protected:
  detail::HostTransport& transport() override;
  WorkPtr do_send(const Tensor& tensor, int dst, int tag) override;
  WorkPtr do_recv(const Tensor& tensor, int src, int tag) override;

 private:
  ProcessGroupMPI(int rank, int size, std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::dist
