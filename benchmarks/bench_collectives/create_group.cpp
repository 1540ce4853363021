#include "create_group.h"

#include <fmt/format.h>

#include <algorithm>

#include "ddp/config.h"
#include "ddp/dist/init.h"

namespace bench {

// The group comes from init_process_group, so the benchmark runs under the
// same launchers as a trainer: mpirun for mpi, ddprun/torchrun/srun (with
// MASTER_ADDR/MASTER_PORT) for gloo. The buffers are host memory, so nccl
// (CUDA tensors only) is refused here until the benchmark grows CUDA buffers.
std::shared_ptr<ddp::dist::ProcessGroup> create_group(const std::string& backend) {
  auto have = ddp::dist::available_backends();
  if (std::find(have.begin(), have.end(), backend) == have.end())
    throw BackendUnavailable(fmt::format("backend {} not available in this build", backend));
  if (backend == "nccl")
    throw BackendUnavailable("backend nccl: bench_collectives measures host buffers only so far");
  ddp::dist::InitOptions o;
  o.backend = backend;
  o.device = ddp::Device::cpu();
  return ddp::dist::init_process_group(o).group;
}

}  // namespace bench
