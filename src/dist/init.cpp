// init_process_group: launch environment -> device -> store -> process group.
//
// Note [Choosing the backend]
// As in torch: nccl for CUDA devices, gloo for the CPU. Two refinements:
// under mpirun without MASTER_ADDR there is no address for a store, so a CPU
// job takes the mpi backend (MPI brings its own rendezvous); and a build
// without a backend falls back to the next one that can take the device
// (CUDA tensors are staged through host memory by gloo and mpi). nccl shares
// its unique id through the store, or through MPI under mpirun. An explicit
// backend is never replaced: asking for one this build lacks is an error.

#include "ddp/dist/init.h"

#include <algorithm>

#include "ddp/config.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/dist/tcp_store.h"
#include "ddp/tensor/cuda.h"
#if DDP_HAVE_GLOO
#include "ddp/dist/process_group_gloo.h"
#endif
#if DDP_HAVE_MPI
#include "ddp/dist/process_group_mpi.h"
#endif
#if DDP_HAVE_NCCL
#include "ddp/dist/process_group_nccl.h"
#endif

namespace ddp::dist {

std::vector<std::string> available_backends() {
  std::vector<std::string> out;
#if DDP_HAVE_GLOO
  out.push_back("gloo");
#endif
#if DDP_HAVE_MPI
  out.push_back("mpi");
#endif
#if DDP_HAVE_NCCL
  out.push_back("nccl");
#endif
  return out;
}

namespace {

bool has_backend(const std::string& b) {
  auto all = available_backends();
  return std::find(all.begin(), all.end(), b) != all.end();
}

std::string backends_list() {
  std::string s;
  for (const std::string& b : available_backends()) s += (s.empty() ? "" : ", ") + b;
  return s.empty() ? "none" : s;
}

// A store can be made: the caller gave one, the launcher says where rank 0
// hosts it, or the job is one process (a private store on 127.0.0.1).
bool store_possible(const InitOptions& o, const LaunchEnv& env) {
  return o.store || !env.master_addr.empty() || env.world_size == 1;
}

LaunchEnv resolve_env(const InitOptions& o) {
  LaunchEnv env = detect_launch_env();
  DDP_CHECK((o.rank < 0) == (o.world_size < 0),
            "init_process_group: rank and world_size go together (got rank {}, world_size {})",
            o.rank, o.world_size);
  if (o.world_size >= 0) {
    DDP_CHECK(o.world_size >= 1 && o.rank < o.world_size,
              "init_process_group: invalid rank {} for world size {}", o.rank, o.world_size);
    if (env.world_size != o.world_size || env.rank != o.rank) {
      env.local_rank = o.rank;  // started by hand: assume one node unless told
      env.local_world_size = o.world_size;
    }
    env.rank = o.rank;
    env.world_size = o.world_size;
    env.launcher = "explicit";
  }
  if (!o.master_addr.empty()) env.master_addr = o.master_addr;
  if (o.master_port > 0) env.master_port = o.master_port;
  DDP_CHECK(o.master_port >= 0 && o.master_port < 65536, "init_process_group: bad master_port {}",
            o.master_port);
  return env;
}

Device resolve_device(const InitOptions& o, const LaunchEnv& env) {
  if (o.device) {
    if (o.device->is_cuda()) {
      DDP_CHECK_T(DeviceError, cuda::is_available(),
                  "init_process_group: device {} asked for, but CUDA is unavailable: {}",
                  o.device->str(), cuda::unavailable_reason());
      cuda::set_device(o.device->index);
    }
    return *o.device;
  }
  if (!cuda::is_available()) return Device::cpu();
  Device d = Device::cuda(select_local_device(env, cuda::device_count()));
  cuda::set_device(d.index);
  return d;
}

std::string resolve_backend(const InitOptions& o, const LaunchEnv& env, const Device& device) {
  if (!o.backend.empty()) {
    DDP_CHECK(o.backend == "nccl" || o.backend == "gloo" || o.backend == "mpi",
              "init_process_group: unknown backend '{}' (expected nccl, gloo or mpi)", o.backend);
    DDP_CHECK(has_backend(o.backend),
              "init_process_group: this libddp was built without the {} backend (it has: {})",
              o.backend, backends_list());
    DDP_CHECK_T(DeviceError, o.backend != "nccl" || device.is_cuda(),
                "init_process_group: the nccl backend needs a CUDA device, the device is {}",
                device.str());
    return o.backend;
  }
  // Note [Choosing the backend]
  const bool have_store = store_possible(o, env);
  const bool mpi_world = env.launcher == "mpirun" && has_backend("mpi");
  std::vector<std::string> order;
  if (device.is_cuda()) order.push_back("nccl");
  if (env.launcher == "mpirun" && !have_store) order.push_back("mpi");
  order.push_back("gloo");
  order.push_back("mpi");
  for (const std::string& b : order) {
    if (!has_backend(b)) continue;
    if (b == "mpi" && env.launcher != "mpirun") continue;  // MPI needs mpirun's world
    if (b == "gloo" && !have_store) continue;
    if (b == "nccl" && !have_store && !mpi_world) continue;  // no way to share the id
    return b;
  }
  DDP_THROW(ValueError,
            "init_process_group: no backend fits: device {}, launcher {}, MASTER_ADDR {}; this "
            "libddp has: {} (gloo and nccl need MASTER_ADDR/MASTER_PORT, mpi needs mpirun)",
            device.str(), env.launcher, env.master_addr.empty() ? "unset" : env.master_addr,
            backends_list());
}

std::shared_ptr<Store> make_store(const InitOptions& o, const LaunchEnv& env) {
  if (o.store) {
    if (o.timeout.count() > 0) o.store->set_timeout(o.timeout);
    return o.store;
  }
  TCPStoreOptions so;
  if (env.world_size == 1 && env.master_addr.empty()) {
    so.host = "127.0.0.1";  // a job of one hosts a private store
    so.bind_address = "127.0.0.1";
    so.port = 0;
  } else {
    DDP_CHECK(!env.master_addr.empty() && env.master_port > 0,
              "init_process_group (rank {} of {}, launched by {}): MASTER_ADDR and MASTER_PORT "
              "must be set (or passed as master_addr/master_port) for the store",
              env.rank, env.world_size, env.launcher);
    so.host = env.master_addr;
    so.port = uint16_t(env.master_port);
  }
  so.is_server = env.rank == 0;
  so.world_size = env.world_size;
  if (o.timeout.count() > 0) so.timeout = o.timeout;
  return std::make_shared<TCPStore>(so);
}

}  // namespace

World init_process_group(const InitOptions& options) {
  DDP_CHECK(options.timeout.count() >= 0, "init_process_group: negative timeout");
  World w;
  w.env = resolve_env(options);
  w.device = resolve_device(options, w.env);
  const std::string backend = resolve_backend(options, w.env, w.device);
  DDP_LOG_INFO("init_process_group: rank {} of {} (local {} of {}, {}), device {}, backend {}",
               w.env.rank, w.env.world_size, w.env.local_rank, w.env.local_world_size,
               w.env.launcher, w.device.str(), backend);

  if (backend == "mpi") {
#if DDP_HAVE_MPI
    DDP_CHECK(is_mpi_launch(), "init_process_group: the mpi backend needs a launch by mpirun");
    auto pg = ProcessGroupMPI::create();
    DDP_CHECK(pg->rank() == w.env.rank && pg->size() == w.env.world_size,
              "init_process_group: MPI says rank {} of {}, the launch environment says {} of {}",
              pg->rank(), pg->size(), w.env.rank, w.env.world_size);
    if (!w.env.master_addr.empty() || options.store) w.store = make_store(options, w.env);
    w.group = pg;
#endif
  } else if (backend == "gloo") {
#if DDP_HAVE_GLOO
    w.store = make_store(options, w.env);
    GlooOptions go;
    go.master_addr = w.env.master_addr;
    go.timeout = options.timeout;
    go.store_host_rank = options.store ? -1 : 0;
    w.group = ProcessGroupGloo::create(w.store, w.env.rank, w.env.world_size, go);
#endif
  } else if (backend == "nccl") {
#if DDP_HAVE_NCCL
    ProcessGroupNCCLOptions no;
    no.device = w.device.index;
    if (options.timeout.count() > 0) no.timeout = options.timeout;
    if (store_possible(options, w.env)) {
      w.store = make_store(options, w.env);
      w.group = ProcessGroupNCCL::create(*w.store, w.env.rank, w.env.world_size, no);
    } else {
#if DDP_HAVE_MPI
      // mpirun without MASTER_ADDR: the unique id travels over MPI.
      auto bootstrap = ProcessGroupMPI::create();
      w.group = ProcessGroupNCCL::create(*bootstrap, no);
#endif
    }
#endif
  }
  DDP_CHECK(w.group != nullptr, "init_process_group: backend {} is not in this build", backend);
  if (options.timeout.count() > 0) w.group->set_timeout(options.timeout);
  return w;
}

}  // namespace ddp::dist
