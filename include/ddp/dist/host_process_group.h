#pragma once
// HostProcessGroup: the base of the backends that run on the host (mpi,
// gloo). It implements every collective once, as the sequence stage, submit,
// pack, call, unpack, unstage (Note [Host collective sequence] in
// src/dist/host_collectives.h); a backend supplies its library calls as a
// transport (an internal interface) and its own point-to-point.

#include "ddp/dist/process_group.h"

namespace ddp::dist {

namespace detail {
class HostTransport;
}

class HostProcessGroup : public ProcessGroup {
 public:
  using ProcessGroup::ProcessGroup;
  // CPU tensors; CUDA tensors staged through host memory (Note [Host
  // staging]); avg as sum then divide.
  BackendCaps caps() const override { return BackendCaps::host_backend(); }

 protected:
  virtual detail::HostTransport& transport() = 0;

  WorkPtr do_allreduce(Tensors& tensors, ReduceOp op) final;
  WorkPtr do_broadcast(Tensors& tensors, int root) final;
  WorkPtr do_reduce(Tensors& tensors, int root, ReduceOp op) final;
  WorkPtr do_allgather(Tensors& outputs, const Tensor& input) final;
  WorkPtr do_reduce_scatter(const Tensor& output, Tensors& inputs, ReduceOp op) final;
  WorkPtr do_all_to_all(const Tensor& output, const Tensor& input) final;
  WorkPtr do_barrier() final;
};

}  // namespace ddp::dist
