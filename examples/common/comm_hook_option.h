#pragma once
// The trainers' --comm-hook (allreduce, fp16, bf16, powersgd; docs/powersgd.md).

#include <cstdint>
#include <memory>
#include <string>

#include "ddp/parallel/distributed.h"
#include "ddp/parallel/powersgd.h"

namespace examples {

// Registers the hook named by --comm-hook on ddp_model ("allreduce": none,
// DDP's own). Returns PowerSGD's state, which the caller adds to its
// checkpoint, for "powersgd", else null.
std::shared_ptr<ddp::parallel::PowerSGDState> register_comm_hook_option(
    ddp::parallel::DistributedDataParallelBase& ddp_model, const std::string& hook,
    int64_t powersgd_rank, int64_t powersgd_start_iter);

}  // namespace examples
