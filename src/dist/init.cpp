// init_process_group: launch environment -> device -> store -> process group.
//
// Note [Choosing the backend]
// As in torch: a rank that computes on a GPU gets "cpu:gloo,cuda:nccl" (a
// RoutingProcessGroup, Note [Routing by device]: nccl for CUDA tensors, gloo
// for the CPU tensors of DDP's bookkeeping, over one store); a CPU rank gets
// gloo. For each device type the registry's backends (Note [Backend
// registry]) that take it and can run in this launch are ranked: native CUDA
// backends first for CUDA tensors, then by preference (gloo before mpi).
// Under mpirun without MASTER_ADDR there is no address for a store, so gloo
// cannot run and mpi takes the CPU tensors (MPI brings its own rendezvous;
// nccl then shares its unique id through it). When one backend wins every
// device type, the group is that backend itself. An explicit backend
// ("nccl", "gloo", "mpi", "cpu:gloo,cuda:nccl") is never replaced: asking for
// one this build lacks, or that cannot run here, is an error.

#include "ddp/dist/init.h"

#include <algorithm>
#include <map>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/dist/backend_registry.h"
#include "ddp/dist/routing_process_group.h"
#include "ddp/dist/tcp_store.h"
#include "ddp/tensor/cuda.h"

namespace ddp::dist {

std::vector<std::string> available_backends() { return registered_backends(); }

namespace {

const char* type_name(DeviceType t) { return t == DeviceType::CUDA ? "cuda" : "cpu"; }

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
  // With the launcher's store (TORCHELASTIC_USE_AGENT_STORE) every rank is a
  // client, and none counts itself: a replacement rank would count twice.
  so.is_server = env.rank == 0 && !env.agent_store;
  if (!env.agent_store) so.world_size = env.world_size;
  if (o.timeout.count() > 0) so.timeout = o.timeout;
  return std::make_shared<TCPStore>(so);
}

const BackendInfo& registered(const std::string& name) {
  const BackendInfo* info = find_backend(name);
  DDP_CHECK(info != nullptr,
            "init_process_group: this libddp has no backend '{}' (it has: {})", name,
            backends_list());
  return *info;
}

// "nccl" -> every device type nccl takes; "cpu:gloo,cuda:nccl" -> as written.
BackendPlan parse_backend(const std::string& spec) {
  return parse_backend_spec(spec, "init_process_group", registered);
}

// See Note [Choosing the backend].
BackendPlan default_plan(const BackendContext& ctx) {
  std::vector<DeviceType> types = {DeviceType::CPU};
  if (ctx.device.is_cuda()) types.push_back(DeviceType::CUDA);
  BackendPlan plan;
  for (DeviceType t : types) {
    const BackendInfo* best = nullptr;
    auto rank = [t](const BackendInfo& b) {
      return std::make_pair(t == DeviceType::CUDA && b.native_cuda ? 0 : 1, b.preference);
    };
    // A CPU-only job never needs nccl: leave libddp_cuda.so closed (Note
    // [Loading CUDA when first used] in src/tensor/cuda_runtime.h).
    for (const std::string& name : registered_backends(ctx.device.is_cuda())) {
      const BackendInfo& b = *find_backend(name);
      if (!b.takes(t) || !b.unusable(ctx).empty()) continue;
      if (!best || rank(b) < rank(*best)) best = &b;
    }
    if (!best) {
      std::string why;
      for (const std::string& name : registered_backends())
        why += fmt::format("; {}: {}", name,
                           find_backend(name)->takes(t) ? find_backend(name)->unusable(ctx)
                                                        : std::string("takes no ") + type_name(t) +
                                                              " tensors");
      DDP_THROW(ValueError,
                "init_process_group: no backend fits {} tensors: device {}, launcher {}, "
                "MASTER_ADDR {}; this libddp has: {}{}",
                type_name(t), ctx.device.str(), ctx.env.launcher,
                ctx.env.master_addr.empty() ? "unset" : ctx.env.master_addr, backends_list(), why);
    }
    plan[t] = best->name;
  }
  // One backend that takes everything asked of it serves alone, for every
  // device type it takes (a CPU rank's gloo also stages CUDA tensors).
  if (plan.size() == 1 || plan[DeviceType::CPU] == plan[DeviceType::CUDA]) {
    const std::string only = plan.begin()->second;
    plan.clear();
    for (DeviceType t : find_backend(only)->devices) plan[t] = only;
  }
  return plan;
}

// "gloo" when one backend serves every device type it takes, else
// "cpu:gloo,cuda:nccl".
std::string describe(const BackendPlan& plan) {
  std::string first = plan.begin()->second, s;
  bool one = true;
  for (const auto& [t, name] : plan) {
    one = one && name == first;
    s += fmt::format("{}{}:{}", s.empty() ? "" : ",", type_name(t), name);
  }
  return one && plan.size() == find_backend(first)->devices.size() ? first : s;
}

// Creates each backend once (CPU first: nccl may bootstrap through it) and
// routes when more than one backend, or fewer device types than the backend
// takes, are asked for.
std::shared_ptr<ProcessGroup> make_group(const BackendPlan& plan, BackendContext ctx) {
  std::map<std::string, std::shared_ptr<ProcessGroup>> made;
  std::vector<RoutingProcessGroup::Route> routes;
  for (const auto& [type, name] : plan) {
    const BackendInfo& info = *find_backend(name);
    if (!made.count(name)) {
      const std::string why = info.unusable(ctx);
      DDP_CHECK(why.empty(), "init_process_group: the {} backend cannot run here: {}", name, why);
      made[name] = info.create(ctx);
      if (type == DeviceType::CPU) ctx.host_group = made[name];
    }
    routes.emplace_back(type, made[name]);
  }
  if (made.size() == 1 && describe(plan) == plan.begin()->second) return made.begin()->second;
  return std::make_shared<RoutingProcessGroup>(std::move(routes));
}

}  // namespace

std::shared_ptr<Store> connect_store(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  DDP_CHECK(timeout.count() >= 0, "connect_store: negative timeout");
  InitOptions o;
  o.timeout = timeout;
  return make_store(o, env);
}

World init_process_group(const InitOptions& options) {
  DDP_CHECK(options.timeout.count() >= 0, "init_process_group: negative timeout");
  World w;
  w.env = resolve_env(options);
  w.device = resolve_device(options, w.env);
  BackendContext ctx;
  ctx.rank = w.env.rank;
  ctx.size = w.env.world_size;
  ctx.device = w.device;
  ctx.env = w.env;
  ctx.store_from_caller = options.store != nullptr;
  ctx.timeout = options.timeout;
  ctx.async_error_handling = options.async_error_handling;
  BackendPlan plan;
  if (!options.backend.empty()) plan = parse_backend(options.backend);  // errors before the store
  if (store_possible(options, w.env)) ctx.store = make_store(options, w.env);
  if (plan.empty()) plan = default_plan(ctx);
  if (plan.count(DeviceType::CUDA) && !plan.count(DeviceType::CPU) && !w.device.is_cuda())
    DDP_THROW(DeviceError, "init_process_group: the {} backend needs a CUDA device, the device is {}",
              describe(plan), w.device.str());
  DDP_LOG_INFO("init_process_group: rank {} of {} (local {} of {}, {}), device {}, backend {}",
               w.env.rank, w.env.world_size, w.env.local_rank, w.env.local_world_size,
               w.env.launcher, w.device.str(), describe(plan));
  w.group = make_group(plan, ctx);
  w.store = ctx.store;
  if (options.timeout.count() > 0) w.group->set_timeout(options.timeout);
  return w;
}

}  // namespace ddp::dist
