#pragma once
// ProcessGroupNCCL: the "nccl" backend, collectives on CUDA tensors through
// NCCL. Only declared here; it exists in builds with DDP_HAVE_NCCL
// (ddp/config.h). No NCCL or CUDA header is included: NCCL types stay in the
// .cpp files (pimpl), so users of libddp need no NCCL include path.
//
// Use (every rank, in the same order):
//   ddp::cuda::set_device(local_rank);                 // or options.device
//   auto pg = ddp::dist::ProcessGroupNCCL::create(store, rank, world);
//   pg->allreduce({grad})->wait();   // orders the current stream; see below
//
// Under mpirun, exchange the NCCL id through an MPI group instead of a store:
//   auto mpi = ddp::dist::ProcessGroupMPI::create();
//   auto pg = ddp::dist::ProcessGroupNCCL::create(*mpi);
//
// Semantics (docs/dist.md, section "nccl"): collectives run on a
// communication stream of the group, ordered after the work already queued
// on the caller's current stream; Work::wait() makes the caller's current
// stream wait for the collective (it does not block the host unless
// blocking_wait is set, or the Work is a barrier). A watchdog thread fails
// every outstanding Work and aborts the communicator when an operation
// outlives the timeout or NCCL reports an asynchronous error; afterwards
// every collective of the group raises. See Note [NCCL stream ordering],
// Note [NCCL watchdog] and Note [NCCL shutdown] in src/dist/.

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "ddp/dist/process_group.h"
#include "ddp/dist/store.h"

namespace ddp::dist {

struct ProcessGroupNCCLOptions {
  // The limit on one operation, from its enqueue to its end on the GPU: past
  // it the watchdog aborts the group (Note [NCCL watchdog]). Also bounds
  // creation. Unset: DDP_NCCL_TIMEOUT_S (seconds, may be fractional), else
  // 10 minutes. ProcessGroup::set_timeout() changes it for later operations;
  // zero means no limit.
  std::optional<std::chrono::milliseconds> timeout;
  // The CUDA device of this rank; -1: the calling thread's current device.
  // Every tensor passed to the group must live there.
  int device = -1;
  // Work::wait() also blocks the calling thread until the operation has
  // finished on the GPU, and raises its error there. Unset:
  // DDP_NCCL_BLOCKING_WAIT (1/0, true/false, ...), else false.
  std::optional<bool> blocking_wait;
  // The communication stream gets the highest priority, so its kernels are
  // scheduled ahead of compute kernels queued at the same time.
  bool high_priority_stream = false;
  // What the watchdog does after an asynchronous failure (a timeout or an
  // NCCL error): see AsyncErrorHandling in process_group.h. Unset:
  // DDP_ASYNC_ERROR_HANDLING, else raise.
  std::optional<AsyncErrorHandling> async_error_handling;
  // Names the group in messages and as NCCL's commName; also part of the
  // store keys, so two jobs sharing a store stay apart.
  std::string name = "nccl";
};

class ProcessGroupNCCL : public ProcessGroup {
 public:
  using Options = ProcessGroupNCCLOptions;

  // 10 minutes, like torch.
  static constexpr std::chrono::milliseconds kDefaultTimeout{600'000};
  // kDefaultTimeout, or DDP_NCCL_TIMEOUT_S (> 0) when set; a malformed value
  // raises ValueError. Needs no GPU.
  static std::chrono::milliseconds default_timeout();

  // Creates the communicator of rank `rank` in a world of `size`, on
  // options.device. Rank 0 generates the NCCL unique id and publishes it in
  // the store; the others read it (waiting up to the store's timeout). Each
  // rank counts the NCCL groups it created on this store, and the count is
  // part of the key, so several groups may share a store as long as every
  // rank creates them in the same order. Collective: every rank must call it.
  // Raises DeviceError when no usable GPU is present, NcclError when NCCL
  // fails, TimeoutError when the other ranks do not join within the timeout.
  static std::shared_ptr<ProcessGroupNCCL> create(Store& store, int rank, int size,
                                                  Options options = {});
  // Same, with rank and size of `bootstrap`, through which rank 0 broadcasts
  // the unique id (for example a ProcessGroupMPI under mpirun, or a gloo
  // group). Collective over bootstrap.
  static std::shared_ptr<ProcessGroupNCCL> create(ProcessGroup& bootstrap, Options options = {});

  // Waits for the outstanding operations (each up to its timeout, the
  // watchdog still watching), then frees the communicator. Never throws.
  // See Note [NCCL shutdown].
  ~ProcessGroupNCCL() override;

  std::string backend_name() const override { return "nccl"; }
  BackendCaps caps() const override;
  int device() const;
  // True once the watchdog (or a failed enqueue) aborted the communicator;
  // every later operation raises NcclError.
  bool is_aborted() const;

  struct Impl;  // public only so that the .cpp's helpers can name it

 protected:
  WorkPtr do_allreduce(Tensors& tensors, ReduceOp op) override;
  WorkPtr do_broadcast(Tensors& tensors, int root) override;
  WorkPtr do_reduce(Tensors& tensors, int root, ReduceOp op) override;
  WorkPtr do_allgather(Tensors& outputs, const Tensor& input) override;
  WorkPtr do_reduce_scatter(const Tensor& output, Tensors& inputs, ReduceOp op) override;
  WorkPtr do_all_to_all(const Tensor& output, const Tensor& input) override;
  WorkPtr do_barrier() override;
  // NCCL has no tags: messages between a pair of ranks match in the order
  // they were issued, and `tag` is ignored (as in torch).
  WorkPtr do_send(const Tensor& tensor, int dst, int tag) override;
  WorkPtr do_recv(const Tensor& tensor, int src, int tag) override;

 private:
  ProcessGroupNCCL(int rank, int size, std::unique_ptr<Impl> impl);
  static std::shared_ptr<ProcessGroupNCCL> create_with_id(int rank, int size, const Bytes& id,
                                                          const Options& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::dist
