#pragma once
// The process-group backends this build has, by name (the twin of torch's
// Backend.register_backend).
//
// Note [Backend registry]
// Each backend registers itself from its own source file (gloo from
// process_group_gloo.cpp, mpi from process_group_mpi.cpp, nccl from
// register_nccl.cpp) with a name, the device types whose tensors it
// takes, a test of whether it can run in this launch, and a factory. A build
// without a dependency does not compile that file (src/CMakeLists.txt selects
// *_gloo.cpp, *_mpi.cpp, *_nccl.cpp by what was found), so it simply has no
// such registration: init_process_group asks the registry, and neither it nor
// any other code names a backend in an if-chain. An application can register
// its own backend the same way before calling init_process_group.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/core/device.h"
#include "ddp/dist/launch_env.h"
#include "ddp/dist/process_group.h"
#include "ddp/dist/store.h"

namespace ddp::dist {

// What a backend's factory gets from init_process_group.
struct BackendContext {
  int rank = 0;
  int size = 1;
  Device device;      // the device this rank computes on
  LaunchEnv env;      // how the process was launched
  // The rendezvous store; null when none can be made (mpirun without
  // MASTER_ADDR).
  std::shared_ptr<Store> store;
  // The caller passed the store (so no rank is known to host it).
  bool store_from_caller = false;
  // Timeout of every collective; zero: the backend's default.
  std::chrono::milliseconds timeout{0};
  // Unset: the backend's default (DDP_ASYNC_ERROR_HANDLING).
  std::optional<AsyncErrorHandling> async_error_handling;
  // A group of the same ranks made earlier for CPU tensors (or null): a
  // backend may use it to bootstrap, e.g. nccl without a store.
  std::shared_ptr<ProcessGroup> host_group;
};

struct BackendInfo {
  std::string name;
  // The device types whose tensors it takes (natively or staged).
  std::vector<DeviceType> devices;
  // Whether it is the natural choice for CUDA tensors (nccl), rather than
  // staging them through host memory (gloo, mpi).
  bool native_cuda = false;
  // Among backends that fit a device type, the lower is chosen by default.
  int preference = 100;
  // "" when it can run in this launch, else why not (for error messages).
  std::function<std::string(const BackendContext&)> unusable;
  // Makes the group (collective: every rank calls it).
  std::function<std::shared_ptr<ProcessGroup>(const BackendContext&)> create;

  bool takes(DeviceType t) const;
};

// Adds a backend; ValueError when the name is taken or the entry is
// incomplete. Thread-safe.
void register_backend(BackendInfo info);
// The entry, or null when this build has no such backend.
const BackendInfo* find_backend(const std::string& name);
// The registered names, sorted. In a CUDA build nccl registers when
// libddp_cuda.so opens, which find_backend and this do first unless
// `open_cuda_library` is false (then: what is registered now, without
// mapping the CUDA libraries; what a CPU-only choice of backend needs).
std::vector<std::string> registered_backends(bool open_cuda_library = true);

// Which backend takes each device type, in device-type order.
using BackendPlan = std::map<DeviceType, std::string>;
// The backend grammar of init_process_group and ElasticGroup (Note
// [Choosing the backend]): "nccl" -> every device type nccl takes;
// "cpu:gloo,cuda:nccl" -> as written. `who` starts each error message;
// `lookup` returns a backend's entry by name, raising its own error for a
// name it lacks or refuses. ValueError for a malformed spec, DeviceError for
// a backend named for a device type it does not take.
BackendPlan parse_backend_spec(
    const std::string& spec, const char* who,
    const std::function<const BackendInfo&(const std::string&)>& lookup);

// Registers at load time, from a backend's source file:
//   static const BackendRegistration kGloo{{.name = "gloo", ...}};
struct BackendRegistration {
  explicit BackendRegistration(BackendInfo info) { register_backend(std::move(info)); }
};

}  // namespace ddp::dist
