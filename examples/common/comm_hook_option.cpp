#include "common/comm_hook_option.h"

#include "ddp/parallel/comm_hooks.h"

namespace examples {

std::shared_ptr<ddp::parallel::PowerSGDState> register_comm_hook_option(
    ddp::parallel::DistributedDataParallelBase& ddp_model, const std::string& hook,
    int64_t powersgd_rank, int64_t powersgd_start_iter) {
  namespace par = ddp::parallel;
  if (hook == "fp16") ddp_model.register_comm_hook(par::fp16_compress_hook);
  if (hook == "bf16") ddp_model.register_comm_hook(par::bf16_compress_hook);
  if (hook != "powersgd") return nullptr;
  auto state = std::make_shared<par::PowerSGDState>(par::PowerSGDOptions{
      .matrix_approximation_rank = int(powersgd_rank), .start_powerSGD_iter = powersgd_start_iter});
  ddp_model.register_comm_hook(par::powersgd_hook(state));
  return state;
}

}  // namespace examples
