// The nccl backend's entry in the backend registry (Note [Backend
// registry]): built only when NCCL is found, like the backend itself.

#include "ddp/core/error.h"
#include "ddp/dist/backend_registry.h"
#include "ddp/dist/process_group_nccl.h"

namespace ddp::dist {
namespace {

// Without a store the unique id travels over a group of the same ranks:
// the CPU backend made before (mpi under mpirun), else a new mpi group.
std::shared_ptr<ProcessGroup> bootstrap_group(const BackendContext& ctx) {
  if (ctx.host_group) return ctx.host_group;
  const BackendInfo* mpi = find_backend("mpi");
  return mpi ? mpi->create(ctx) : nullptr;
}

const BackendRegistration kNcclBackend{BackendInfo{
    .name = "nccl",
    .devices = {DeviceType::CUDA},
    .native_cuda = true,
    .preference = 0,
    .unusable =
        [](const BackendContext& ctx) -> std::string {
          if (!ctx.device.is_cuda())
            return fmt::format("it needs a CUDA device, the device is {}", ctx.device.str());
          if (ctx.store || ctx.host_group) return "";
          const BackendInfo* mpi = find_backend("mpi");
          if (mpi && mpi->unusable(ctx).empty()) return "";
          return "it needs a store to share its unique id: set MASTER_ADDR and MASTER_PORT";
        },
    .create =
        [](const BackendContext& ctx) -> std::shared_ptr<ProcessGroup> {
          ProcessGroupNCCLOptions no;
          no.device = ctx.device.index;
          if (ctx.timeout.count() > 0) no.timeout = ctx.timeout;
          no.async_error_handling = ctx.async_error_handling;
          if (ctx.store) return ProcessGroupNCCL::create(*ctx.store, ctx.rank, ctx.size, no);
          auto boot = bootstrap_group(ctx);
          DDP_CHECK(boot != nullptr, "init_process_group: nccl has no way to share its unique id");
          return ProcessGroupNCCL::create(*boot, no);
        },
}};

}  // namespace
}  // namespace ddp::dist
