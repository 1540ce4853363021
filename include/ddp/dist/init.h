#pragma once
// init_process_group: join the job this process was launched into.
//
//   auto world = ddp::dist::init_process_group();     // reads the launcher's variables
//   Tensor g = Tensor::ones({4}, TensorOptions().device(world.device));
//   world.group->allreduce({g}, ReduceOp::avg)->wait();
//
// It reads how the process was launched (Note [Launcher precedence] in
// launch_env.h: torchrun/ddprun, mpirun, srun, or nothing), picks this rank's
// GPU from its local rank, makes the rendezvous store (rank 0 hosts a
// TCPStore at MASTER_ADDR:MASTER_PORT and the others connect to it; under
// TORCHELASTIC_USE_AGENT_STORE=True the launcher hosts it) and creates
// the process group, choosing the backend from the device unless told
// (Note [Choosing the backend] in src/dist/init.cpp): on a GPU a group that
// sends CUDA tensors to nccl and CPU tensors to gloo (Note [Routing by
// device] in routing_process_group.h), on the CPU gloo.
//
// Every option left at its default is taken from the environment; an option
// that is set wins over the environment.

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "ddp/core/device.h"
#include "ddp/dist/launch_env.h"
#include "ddp/dist/process_group.h"
#include "ddp/dist/store.h"

namespace ddp::dist {

struct InitOptions {
  // A backend of this build ("nccl", "gloo", "mpi"; see available_backends())
  // for every device type it takes, or one per device type as in torch:
  // "cpu:gloo,cuda:nccl". Empty: the default of the device (Note [Choosing
  // the backend]).
  std::string backend;
  // The device this rank computes on. Unset: cuda:<local_rank % GPUs> when a
  // GPU is usable (and made current), else the CPU.
  std::optional<Device> device;
  // Explicit placement, for a process started by hand; rank and world_size
  // go together. They override the launcher's variables.
  int rank = -1;
  int world_size = -1;
  std::string master_addr;
  int master_port = 0;
  // A store to use instead of the TCPStore at MASTER_ADDR:MASTER_PORT.
  std::shared_ptr<Store> store;
  // Timeout of the store and of every collective. Zero: the defaults (the
  // store's 300 s / DDP_STORE_TIMEOUT_S; NCCL's 10 min / DDP_NCCL_TIMEOUT_S).
  std::chrono::milliseconds timeout{0};
  // What nccl does when a collective fails on the GPU (AsyncErrorHandling in
  // process_group.h). Unset: DDP_ASYNC_ERROR_HANDLING, else raise.
  std::optional<AsyncErrorHandling> async_error_handling;
};

// What init_process_group made. The group is not a process-wide default:
// keep this object and pass the group to whoever needs it.
struct World {
  std::shared_ptr<ProcessGroup> group;
  std::shared_ptr<Store> store;  // null for mpi launched without MASTER_ADDR
  LaunchEnv env;                 // where this process sits in the job
  Device device;                 // the device this rank computes on
  int rank() const { return group->rank(); }
  int size() const { return group->size(); }
};

// Raises ValueError for an unknown or unavailable backend or a malformed
// backend string (naming the backends this build has), DeviceError for a
// backend that cannot take the device (nccl on a CPU rank), or a launch that
// lacks what the backend needs (gloo and nccl need a store: MASTER_ADDR and
// MASTER_PORT); TimeoutError when a rank never arrives.
World init_process_group(const InitOptions& options = {});

// The job's rendezvous store as init_process_group makes it, without a
// process group (for ddp::parallel::ElasticGroup, which makes its own): a
// TCPStore at env.master_addr:master_port that rank 0 hosts, or, when the
// launcher hosts it (env.agent_store: ddprun's elastic mode, torchrun's
// TORCHELASTIC_USE_AGENT_STORE=True), that every rank joins as a client. A
// job of one without MASTER_ADDR gets a private store. ValueError when
// MASTER_ADDR or MASTER_PORT is missing; timeout 0: the store's default.
//   auto env = dist::detect_launch_env();
//   auto store = dist::connect_store(env);
//   parallel::ElasticGroup elastic(store, env.rank, env.world_size, state,
//                                  {.min_size = env.elastic_min, .max_size = env.elastic_max});
std::shared_ptr<Store> connect_store(
    const LaunchEnv& env, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

// The backends this build of libddp has, e.g. {"gloo", "mpi", "nccl"}
// (registered_backends() of Note [Backend registry]).
std::vector<std::string> available_backends();

}  // namespace ddp::dist
