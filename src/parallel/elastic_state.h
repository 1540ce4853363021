#pragma once
// What the members of an elastic job share besides the store: the training
// state a joining rank receives, and the process group of each generation
// (Note [Elastic membership] in ddp/parallel/elastic.h, Note [Elastic
// backends] in elastic.cpp).

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ddp/core/device.h"
#include "ddp/dist/launch_env.h"
#include "ddp/dist/process_group.h"
#include "ddp/dist/process_group_gloo.h"
#include "ddp/dist/store.h"
#include "ddp/io/checkpoint.h"

namespace ddp::parallel::detail {

using NamedDicts = std::vector<std::pair<std::string, TensorDict>>;
struct BroadcastDicts {
  std::string header;  // lines of free text
  NamedDicts dicts;
};
// Rank `root` of `group` sends `header` (lines of text, none starting with
// "section" or "tensor") and `dicts`; every rank gets them back. Tensors
// travel as broadcast_training_state says. A collective of the whole group.
BroadcastDicts broadcast_dicts(dist::ProcessGroup& group, const std::string& header,
                               const NamedDicts& dicts, int root, const Device& compute);

// Rank `root` of `group` sends every shared section of `state` (per-rank
// ones travel apart: Note [Elastic per-rank state]), its generators and
// `step`; every other rank loads them and gets root's step back. A
// collective of the whole group. `compute` is this rank's device: the
// listing travels on dist::control_device(group, compute), CUDA tensors on
// `compute` when the group takes them natively, CPU tensors on the control
// device (a bare nccl group takes no CPU tensors). ValueError (on the
// receiving rank) when a section refuses what it received.
int64_t broadcast_training_state(dist::ProcessGroup& group, io::Checkpoint& state, int64_t step,
                                 int root, const Device& compute);

// One line per tensor of `section` ("name shape dtype"), in order: what a
// joiner's model must match. Empty when there is no such section.
std::string describe_section(const io::Checkpoint& state, const std::string& section);

// The first difference between two describe_section() texts, as a sentence
// naming the parameter and both shapes; empty when they are equal.
std::string first_difference(const std::string& ours, const std::string& theirs);

// ElasticOptions::backend, checked once and used for every generation.
class ElasticBackend {
 public:
  // "gloo", another registered backend for every device type it takes, or
  // one per device type ("cpu:gloo,cuda:nccl"). ValueError for an unknown
  // name (naming the registered ones), "mpi" (why), a malformed spec, or a
  // backend that cannot run here; DeviceError when no backend takes the
  // tensors of `device`.
  ElasticBackend(std::string spec, const Device& device, dist::GlooOptions gloo,
                 std::chrono::milliseconds timeout, std::shared_ptr<dist::Store> store);

  // The group of `rank` of `size` over `store`; backend B keeps its keys
  // under "<prefix>B/". Collective: every member calls it.
  std::shared_ptr<dist::ProcessGroup> create(const std::shared_ptr<dist::Store>& store,
                                             const std::string& prefix, int rank,
                                             int size) const;
  const std::string& spec() const { return spec_; }

 private:
  std::shared_ptr<dist::ProcessGroup> create_one(const std::string& name,
                                                 const std::shared_ptr<dist::Store>& store,
                                                 const std::string& prefix, int rank, int size,
                                                 std::shared_ptr<dist::ProcessGroup> host) const;

  std::string spec_;
  std::map<DeviceType, std::string> plan_;  // which backend takes each device type
  bool routed_ = false;                     // a per-device spec: a RoutingProcessGroup
  Device device_;
  dist::GlooOptions gloo_;
  std::chrono::milliseconds timeout_;
  dist::LaunchEnv env_;
};

// The group ElasticGroup::group() hands out: it forwards every collective to
// one generation's backend group until close(), which destroys that group
// even while DDP's reducer still holds this object (Note [Elastic
// backends]); afterwards every collective raises DistNetworkError.
class GenerationGroup : public dist::ProcessGroup {
 public:
  GenerationGroup(std::shared_ptr<dist::ProcessGroup> inner, int64_t generation);
  ~GenerationGroup() override;

  // Destroys the backend group, if this was its last holder. failed: the
  // generation failed, so nothing it still has queued is worth waiting for:
  // its timeout is first cut to 1 ms (gloo fails what is queued; nccl skips
  // ncclCommFinalize and aborts the communicator). Never throws.
  void close(bool failed);
  bool closed() const;

  std::string backend_name() const override { return name_; }
  dist::BackendCaps caps() const override { return caps_; }
  void set_timeout(std::chrono::milliseconds t) override;

 protected:
  dist::WorkPtr do_allreduce(Tensors& tensors, dist::ReduceOp op) override;
  dist::WorkPtr do_broadcast(Tensors& tensors, int root) override;
  dist::WorkPtr do_reduce(Tensors& tensors, int root, dist::ReduceOp op) override;
  dist::WorkPtr do_allgather(Tensors& outputs, const Tensor& input) override;
  dist::WorkPtr do_reduce_scatter(const Tensor& output, Tensors& inputs,
                                  dist::ReduceOp op) override;
  dist::WorkPtr do_all_to_all(const Tensor& output, const Tensor& input) override;
  dist::WorkPtr do_barrier() override;
  dist::WorkPtr do_send(const Tensor& tensor, int dst, int tag) override;
  dist::WorkPtr do_recv(const Tensor& tensor, int src, int tag) override;

 private:
  std::shared_ptr<dist::ProcessGroup> inner(const char* op) const;

  const int64_t generation_;
  const std::string name_;
  const dist::BackendCaps caps_;
  mutable std::mutex mu_;
  std::shared_ptr<dist::ProcessGroup> inner_;
};

}  // namespace ddp::parallel::detail
