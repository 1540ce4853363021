#pragma once
// RoutingProcessGroup: one process group over several backends, one per
// device type, as torch's "cpu:gloo,cuda:nccl".
//
// Note [Routing by device]
// DDP and the tools run small bookkeeping collectives on CPU tensors (the
// model check, the bucket order, the used-parameter flags, a max over ranks
// of a time) next to the gradient collectives on CUDA tensors. NCCL takes
// only CUDA tensors, so a group that is only nccl would force every caller
// to know that and copy to the GPU. A RoutingProcessGroup instead holds one
// backend per device type and sends each collective to the backend of its
// tensors' device (the argument checks already require one device per
// call); barrier goes to the CPU backend when there is one (a host barrier),
// else to the CUDA backend. The backends are separate groups of the same
// ranks over the same store, so a collective on one never waits for one on
// the other: as in torch, order between CPU and CUDA collectives is the
// caller's. A tensor whose device type has no backend raises DeviceError
// naming the device and the group's backends. init_process_group makes one
// by default when the rank computes on a GPU (Note [Choosing the backend]).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ddp/core/device.h"
#include "ddp/dist/process_group.h"

namespace ddp::dist {

class RoutingProcessGroup : public ProcessGroup {
 public:
  using Route = std::pair<DeviceType, std::shared_ptr<ProcessGroup>>;
  // One backend per device type (a backend may serve several). Every backend
  // must have the same rank and size; ValueError otherwise.
  explicit RoutingProcessGroup(std::vector<Route> routes);

  // "cpu:gloo,cuda:nccl".
  std::string backend_name() const override;
  BackendCaps caps() const override;
  // Also sets every backend's timeout.
  void set_timeout(std::chrono::milliseconds t) override;

  // The backend of a device type, or null.
  std::shared_ptr<ProcessGroup> backend(DeviceType type) const;
  const std::vector<Route>& routes() const { return routes_; }

 protected:
  WorkPtr do_allreduce(Tensors& tensors, ReduceOp op) override;
  WorkPtr do_broadcast(Tensors& tensors, int root) override;
  WorkPtr do_reduce(Tensors& tensors, int root, ReduceOp op) override;
  WorkPtr do_allgather(Tensors& outputs, const Tensor& input) override;
  WorkPtr do_reduce_scatter(const Tensor& output, Tensors& inputs, ReduceOp op) override;
  WorkPtr do_all_to_all(const Tensor& output, const Tensor& input) override;
  WorkPtr do_barrier() override;
  WorkPtr do_send(const Tensor& tensor, int dst, int tag) override;
  WorkPtr do_recv(const Tensor& tensor, int src, int tag) override;

 private:
  static int checked_rank(const std::vector<Route>& routes);
  static int checked_size(const std::vector<Route>& routes);
  ProcessGroup& route(const char* op, const Tensor& t) const;
  std::vector<Route> routes_;
};

}  // namespace ddp::dist
