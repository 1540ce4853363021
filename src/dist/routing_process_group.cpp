// See Note [Routing by device] in routing_process_group.h.

#include "ddp/dist/routing_process_group.h"

#include <algorithm>

#include "ddp/core/error.h"

namespace ddp::dist {

namespace {

const char* device_type_name(DeviceType t) { return t == DeviceType::CUDA ? "cuda" : "cpu"; }

}  // namespace

int RoutingProcessGroup::checked_rank(const std::vector<Route>& routes) {
  DDP_CHECK_T(ValueError, !routes.empty(), "RoutingProcessGroup: no backends given");
  for (const Route& r : routes) {
    DDP_CHECK_T(ValueError, r.second != nullptr, "RoutingProcessGroup: null backend for {}",
                device_type_name(r.first));
    DDP_CHECK_T(ValueError,
                r.second->rank() == routes[0].second->rank() &&
                    r.second->size() == routes[0].second->size(),
                "RoutingProcessGroup: backend {} is rank {} of {}, backend {} rank {} of {}",
                r.second->backend_name(), r.second->rank(), r.second->size(),
                routes[0].second->backend_name(), routes[0].second->rank(),
                routes[0].second->size());
    for (const Route& other : routes)
      DDP_CHECK_T(ValueError, &other == &r || other.first != r.first,
                  "RoutingProcessGroup: two backends for {} tensors", device_type_name(r.first));
  }
  return routes[0].second->rank();
}

// Checks too: the order in which the base's arguments are evaluated is
// unspecified.
int RoutingProcessGroup::checked_size(const std::vector<Route>& routes) {
  checked_rank(routes);
  return routes[0].second->size();
}

RoutingProcessGroup::RoutingProcessGroup(std::vector<Route> routes)
    : ProcessGroup(checked_rank(routes), checked_size(routes)), routes_(std::move(routes)) {
  std::chrono::milliseconds longest{0};
  for (const Route& r : routes_) longest = std::max(longest, r.second->timeout());
  ProcessGroup::set_timeout(longest);
}

std::string RoutingProcessGroup::backend_name() const {
  std::string s;
  for (const Route& r : routes_)
    s += fmt::format("{}{}:{}", s.empty() ? "" : ",", device_type_name(r.first),
                     r.second->backend_name());
  return s;
}

// The argument checks ask whether a device type has a backend at all; which
// backend then stages or not is its own business.
BackendCaps RoutingProcessGroup::caps() const {
  BackendCaps c;
  c.cpu_tensors = backend(DeviceType::CPU) != nullptr;
  c.cuda_tensors = backend(DeviceType::CUDA) != nullptr;
  c.stage_cuda_through_host = false;
  c.avg = true;  // each backend implements avg its own way
  return c;
}

void RoutingProcessGroup::set_timeout(std::chrono::milliseconds t) {
  ProcessGroup::set_timeout(t);
  for (const Route& r : routes_) r.second->set_timeout(t);
}

std::shared_ptr<ProcessGroup> RoutingProcessGroup::backend(DeviceType type) const {
  for (const Route& r : routes_)
    if (r.first == type) return r.second;
  return nullptr;
}

ProcessGroup& RoutingProcessGroup::route(const char* op, const Tensor& t) const {
  auto b = backend(t.device().type);
  // Normally refused earlier by the argument checks (caps()); kept so that
  // no path can reach a null backend.
  DDP_CHECK_T(DeviceError, b != nullptr,
              "{} ({} rank {}): the group has no backend for {} tensors ({}); its backends: {}", op,
              backend_name(), rank(), device_type_name(t.device().type), t.describe(),
              backend_name());
  return *b;
}

WorkPtr RoutingProcessGroup::do_allreduce(Tensors& tensors, ReduceOp op) {
  return route("allreduce", tensors.front()).allreduce(tensors, op);
}

WorkPtr RoutingProcessGroup::do_broadcast(Tensors& tensors, int root) {
  return route("broadcast", tensors.front()).broadcast(tensors, root);
}

WorkPtr RoutingProcessGroup::do_reduce(Tensors& tensors, int root, ReduceOp op) {
  return route("reduce", tensors.front()).reduce(tensors, root, op);
}

WorkPtr RoutingProcessGroup::do_allgather(Tensors& outputs, const Tensor& input) {
  return route("allgather", input).allgather(outputs, input);
}

WorkPtr RoutingProcessGroup::do_reduce_scatter(const Tensor& output, Tensors& inputs,
                                               ReduceOp op) {
  return route("reduce_scatter", output).reduce_scatter(output, inputs, op);
}

WorkPtr RoutingProcessGroup::do_all_to_all(const Tensor& output, const Tensor& input) {
  return route("all_to_all", input).all_to_all(output, input);
}

WorkPtr RoutingProcessGroup::do_barrier() {
  auto b = backend(DeviceType::CPU);
  return (b ? b : backend(DeviceType::CUDA))->barrier();
}

WorkPtr RoutingProcessGroup::do_send(const Tensor& tensor, int dst, int tag) {
  return route("send", tensor).send(tensor, dst, tag);
}

WorkPtr RoutingProcessGroup::do_recv(const Tensor& tensor, int src, int tag) {
  return route("recv", tensor).recv(tensor, src, tag);
}

}  // namespace ddp::dist
