#pragma once
// ProcessGroup: collectives over a fixed set of ranks (the twin of c10d's
// ProcessGroup). Collectives take tensors and derive counts and dtypes from
// them; they are asynchronous and return a Work.
//
// Note [Collective argument checks]
// The public methods are non-virtual: they check the arguments once, here,
// for every backend (devices, dtypes, contiguity, equal sizes, ranks in
// range, what the backend supports) and raise ddp::Error subclasses naming
// the collective, the rank and the tensors; then they call the backend's
// protected do_* hook, which may assume valid arguments. So every backend
// rejects bad input the same way, and none can forget a check.

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddp/dist/flight_recorder.h"
#include "ddp/dist/work.h"
#include "ddp/tensor/tensor.h"

namespace ddp::dist {

enum class ReduceOp { sum, avg, min, max, product };
const char* reduce_op_name(ReduceOp op);

// What a backend whose collectives fail asynchronously (nccl: on the GPU,
// noticed by its watchdog) does about it. See Note [Async error handling]
// in src/dist/watchdog_nccl.cpp.
//  raise:     fail every outstanding Work, abort the communicator; every
//             later collective of the group raises (the default).
//  tear_down: the same, then log the error and end the process
//             (std::abort), so that no rank steps an optimizer or writes a
//             checkpoint on what an aborted collective left in its tensors,
//             and the launcher (ddprun, torchrun, mpirun) sees the failure.
enum class AsyncErrorHandling { raise = 0, tear_down = 1 };
// DDP_ASYNC_ERROR_HANDLING: "0"/"raise" or "1"/"tear_down"; unset or empty:
// raise. ValueError naming the variable for anything else.
AsyncErrorHandling async_error_handling_from_env();
ReduceOp reduce_op_from_name(const std::string& name);  // "sum", "avg", ...; ValueError otherwise

// What a backend can do, consulted by the argument checks.
struct BackendCaps {
  bool cpu_tensors = true;
  bool cuda_tensors = false;  // natively (NCCL); host-staged backends say false but stage
  bool stage_cuda_through_host = true;  // Note [Host staging] (src/dist/host_staging.h)
  bool avg = true;           // ReduceOp::avg natively (else sum then divide)

  // A CPU backend (mpi, gloo): CUDA tensors staged through host memory (See
  // Note [Host staging]), avg as sum then divide.
  static BackendCaps host_backend() {
    BackendCaps c;
    c.cpu_tensors = true;
    c.cuda_tensors = false;
    c.stage_cuda_through_host = true;
    c.avg = false;
    return c;
  }
};

class ProcessGroup;

// Where to put a small tensor of host data (flags, lengths, an order) for a
// collective on `group`: the CPU when the group takes CPU tensors (gloo, mpi,
// a RoutingProcessGroup with a CPU backend), else `compute` (a group that is
// only nccl). Control collectives call this instead of asking which backend
// takes which tensors (Note [Routing by device]).
Device control_device(const ProcessGroup& group, const Device& compute);

// DDP_DEBUG: "" / "off" (default), "info" (no extra checks yet) or
// "detail": every collective is first compared across the ranks (Note
// [Collective check mode] in src/dist/collective_check.h). ValueError naming
// the variable for anything else.
enum class DebugLevel { off, info, detail };
DebugLevel debug_level_from_env();

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size);
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;
  virtual BackendCaps caps() const { return {}; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Virtual so that a group of groups (RoutingProcessGroup) passes it on.
  virtual void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  // The last collectives of this group (Note [Flight recorder]); its size
  // comes from DDP_FLIGHT_RECORDER_SIZE at the group's creation.
  FlightRecorder& flight_recorder() const;
  // DDP_DEBUG=detail at creation, or set here (every rank alike).
  bool collective_checks() const { return collective_checks_; }
  void set_collective_checks(bool on) { collective_checks_ = on; }

  // In place on every tensor (several tensors are coalesced into one
  // operation). avg divides by size() and needs floating tensors.
  WorkPtr allreduce(Tensors tensors, ReduceOp op = ReduceOp::sum);
  // Every rank's tensors become root's.
  WorkPtr broadcast(Tensors tensors, int root = 0);
  // The reduction lands in root's tensors; other ranks' tensors are unspecified.
  WorkPtr reduce(Tensors tensors, int root = 0, ReduceOp op = ReduceOp::sum);
  // outputs[r] = rank r's input; outputs.size() == size(), each like input.
  WorkPtr allgather(Tensors outputs, const Tensor& input);
  // output = reduction over ranks of inputs[rank()]; inputs.size() == size().
  WorkPtr reduce_scatter(const Tensor& output, Tensors inputs, ReduceOp op = ReduceOp::sum);
  // Splits input along dim 0 into size() equal chunks; chunk r goes to rank
  // r, and output's chunk r comes from rank r. Same shape in and out.
  WorkPtr all_to_all(const Tensor& output, const Tensor& input);
  WorkPtr barrier();
  // Point to point. tag distinguishes concurrent messages between a pair.
  WorkPtr send(const Tensor& tensor, int dst, int tag = 0);
  WorkPtr recv(const Tensor& tensor, int src, int tag = 0);

 protected:
  // Hooks: arguments already checked (Note [Collective argument checks]).
  virtual WorkPtr do_allreduce(Tensors& tensors, ReduceOp op) = 0;
  virtual WorkPtr do_broadcast(Tensors& tensors, int root) = 0;
  virtual WorkPtr do_reduce(Tensors& tensors, int root, ReduceOp op) = 0;
  virtual WorkPtr do_allgather(Tensors& outputs, const Tensor& input) = 0;
  virtual WorkPtr do_reduce_scatter(const Tensor& output, Tensors& inputs, ReduceOp op) = 0;
  virtual WorkPtr do_all_to_all(const Tensor& output, const Tensor& input) = 0;
  virtual WorkPtr do_barrier() = 0;
  virtual WorkPtr do_send(const Tensor& tensor, int dst, int tag) = 0;
  virtual WorkPtr do_recv(const Tensor& tensor, int src, int tag) = 0;

 private:
  void check_tensor(const char* op, const Tensor& t) const;
  void check_rank(const char* op, int r, const char* what) const;
  // Records the collective, runs the collective check when on, issues it
  // through launch and ties its Work to the record.
  template <class Args, class Launch>
  WorkPtr issue(const char* op, const Tensors& tensors, Args&& args, Launch&& launch);
  void check_same_call(const char* op, const std::string& args, const Tensors& tensors,
                       uint64_t seq);
  mutable std::once_flag recorder_once_;
  mutable std::shared_ptr<FlightRecorder> recorder_;
  bool collective_checks_ = false;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
};

}  // namespace ddp::dist
