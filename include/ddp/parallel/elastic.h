#pragma once
// ElasticGroup: fault-tolerant data parallelism without restarts. When a
// rank dies, the survivors agree on the new membership through the job's
// store, drop the failed step, build a new process group without the lost
// rank and go on; a new or restarted rank joins at a step boundary and receives
// the whole training state from a healthy peer, not from a checkpoint.
//
//   io::Checkpoint state;                 // what a joining rank must receive
//   state.add("model", *model).add("optimizer", opt).add("sampler", sampler);
//   parallel::ElasticGroup elastic(store, replica_id, world_size, state);
//   parallel::DistributedDataParallel ddp(model, elastic.group(), {.fault_tolerant = true});
//   elastic.on_change([&] { ddp.reset_group(elastic.group()); });
//   while (elastic.step() < steps) {
//     auto b = sampler.batch(elastic.rank(), elastic.size());
//     elastic.run_step([&] { loss(ddp(x(b)), y(b)).backward(); },   // compute
//                      [&] { opt.step(); opt.zero_grad(); sampler.advance(elastic.size()); });
//   }
//
// The store must outlive every rank (a TCPStore hosted by the launcher,
// `ddprun --elastic`, or a separate process): a store hosted by a worker
// dies with it, and with it the job (DistNetworkError naming the store).
// Each generation's group is made through the backend registry:
// ElasticOptions::backend is "gloo" (the default), "cpu:gloo,cuda:nccl" on
// GPUs (nccl's communicator is aborted and re-created at every change), or
// any registered backend but mpi (Note [Elastic backends] in
// src/parallel/elastic.cpp).
//
// Note [Elastic membership]
// Members are named by a replica id that never changes (the launcher's
// RANK at the first start); ranks are positions in the membership of one
// generation. Generation 0 is the founding world: until it is formed, every
// process adds its id to one list (once: a restarted founder takes the
// place of the one that died) and the first to see world_size ids
// publishes them; a process that finds it formed without its id joins. Every later
// generation is either
//  - a join: at the commit of step s (below) the deciding rank admits the
//    pending join requests that pass the checks (job token, the model's
//    parameter names and shapes, a step not ahead of the job's), publishes
//    the next generation's members (the current ones, then the joiners)
//    with its decision, and after applying step s every member and joiner
//    creates the next group; or
//  - a heal: a step was aborted. Every survivor appends "<id>:<step>" to
//    the next generation's candidate list and publishes that list as the
//    members, with compare_set so that the first publisher wins and all
//    adopt its list, once every member of the old generation is on it or
//    `settle` has passed since its own arrival. A survivor that arrives
//    after the publication is not a member: it joins as a new rank would.
//    A membership below min_size stops every rank (ddp::Error naming the
//    lost replicas). A failure while creating the new group (another rank
//    lost) starts another heal.
// Members that hold the job's state come first (then by replica id), so
// rank 0 of a generation always has it; when any member lacks it (a
// joiner), rank 0 broadcasts every section of the Checkpoint, its
// generators and the step count, and the joiner loads them: afterwards
// every replica is bit-identical. The founders get rank 0's state the same
// way, as DDP's constructor would broadcast it; DDP itself is built with
// DDPOptions::fault_tolerant, so that its construction communicates nothing
// (a joiner builds it alone) and reset_group() follows the changes.
//
// Note [Elastic commit]
// A step is applied (optimizer step, sampler advance) on every member or
// on none. After its compute each member adds one to the step's counter in
// the store; the member whose addition completes the count is the decider
// and writes the decision "commit" (with the joiners it admits, if any).
// A member whose compute failed with a communication error (a lost peer,
// a timeout) writes "abort" instead, and a member that waits longer than
// `timeout` for a decision writes "abort" too; all writes are compare_set
// on one key, so the first wins and every member acts on the same value.
// A member that failed never adds to the count, so "commit" means every
// member finished the compute: its gradients are the average over all of
// them. An aborted step changes nothing (the reducer has cleared every
// .grad, Note [Bucket errors]; apply never ran), and the step is redone by
// the next generation from the same sampler position. Errors that are not
// communication errors (a shape error in the model) are not caught: they
// end this rank, which the others then see as lost.
// Cost per step: two or three store requests per rank (the counter, the
// decision; a join check by the decider only), no collective.
// A communication error inside apply (ZeRO-1's all-gather, Note [ZeRO-1 in
// an elastic job] in ddp/parallel/zero.h) leaves the step committed and
// counted, and the membership heals at once.
//
// Note [Elastic per-rank state]
// A per-rank section of the Checkpoint (ZeRO-1's shards, PowerSGD's memory:
// parallel::add_checkpoint_section) is not the same on every member, so
// rank 0 cannot simply send it. Each member that holds the job's state
// takes its sections' peer_save() when a membership change begins (before
// DDP's reset_group re-cuts anything), and the first run_step of the new
// generation, before its compute, runs the exchange: every member says
// whether it holds such a snapshot and which per-rank sections it has; each
// holder in turn broadcasts its snapshot; then every member calls each
// section's load with RankFiles::from_peers set, the holders' states in
// rank order and `own` its own index among them. ZeRO-1 re-cuts its shards
// for the new world and reassembles the optimizer state; PowerSGD takes
// rank 0's counters and restarts its memory. A joiner adds its sections
// after its DDP and optimizer exist, before its first run_step; a member
// without a section the holders sent stops every member (ValueError naming
// the replica and the section). A failure during the exchange heals like a
// failed compute, and the snapshots are kept for the next generation's
// exchange. After a heal with per-rank sections, rank 0 of the new
// generation also sends the shared sections (the model) to everyone, since
// a member lost inside a ZeRO-1 all-gather leaves its elements differing.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/core/device.h"
#include "ddp/dist/process_group.h"
#include "ddp/dist/process_group_gloo.h"
#include "ddp/dist/store.h"
#include "ddp/io/checkpoint.h"

namespace ddp::parallel {

namespace detail {
struct ElasticMember {
  int id;         // replica id
  int64_t step;   // steps its state has committed; -1: it has none
};
class ElasticBackend;
class GenerationGroup;
}  // namespace detail

struct ElasticOptions {
  // Fewer members than this after a heal stops every rank.
  int min_size = 1;
  // Joiners beyond this many members wait for a place (0: no limit).
  int max_size = 0;
  // Each generation's collectives, the wait for a commit decision, and the
  // creation of a group.
  std::chrono::milliseconds timeout{30'000};
  // How long a heal waits for survivors that have not arrived yet.
  std::chrono::milliseconds settle{1'000};
  // How long a joining rank waits to be admitted.
  std::chrono::milliseconds join_timeout{300'000};
  // Keys of the job in the store.
  std::string key_prefix = "ddp/elastic/";
  // Joiners must present the founders' token (another job's rank is
  // refused). Empty: DDP_ELASTIC_TOKEN, else no token.
  std::string job_token;
  // The Checkpoint section whose tensors a joiner's must match in names,
  // shapes and dtypes before it is admitted ("" for none).
  std::string model_section = "model";
  // The step count of this process's state (-1: unknown): the founders'
  // step() starts there (0 when unknown; e.g. the step of the checkpoint
  // they resumed from). A joiner whose step is ahead of the job's is refused
  // (it belongs to another run); its state is replaced by the peer's in any
  // case.
  int64_t resume_step = -1;
  // The backend of every generation's group, as init_process_group takes
  // it: a registered backend ("gloo", "nccl", one the application
  // registered) for every device type it takes, or one per device type,
  // "cpu:gloo,cuda:nccl" (what a GPU job wants: nccl for the gradients, gloo
  // for the CPU tensors of the bookkeeping). "mpi" is refused (ValueError:
  // MPI_COMM_WORLD cannot shrink without ULFM). Note [Elastic backends].
  std::string backend = "gloo";
  // The device this rank computes on: what the backends are made for (nccl
  // needs a CUDA device) and where the state a joiner receives travels.
  Device device = Device::cpu();
  // Address options of the gloo groups; group_name and timeout are set by
  // the ElasticGroup, and roll_call_grace is shortened (membership is found
  // by the heal, not by the roll call of Note [Naming the lost rank]).
  dist::GlooOptions gloo = {};
};

class ElasticGroup {
 public:
  // Every process of the job calls this: the founders (the first
  // world_size arrivals) return when all of them arrived; a later process
  // (a replacement, an added node) returns once it was admitted at a step
  // boundary and received the state. `state` is what a joiner receives and
  // must outlive the group; per-rank sections (ZeRO-1, PowerSGD) may be
  // added later (Note [Elastic per-rank state]). ValueError for bad options (an
  // unknown backend, naming the registered ones; mpi, saying why), a
  // replica id that is already a member, another job's token, a model that
  // differs (naming the first parameter and both shapes) or a future step;
  // TimeoutError when the founders never gather or no admission comes.
  ElasticGroup(std::shared_ptr<dist::Store> store, int replica_id, int world_size,
               io::Checkpoint& state, ElasticOptions options = {});
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  // The current generation's group; replaced after every membership change,
  // and the old one closed (its collectives raise DistNetworkError) even
  // while DDP still holds it. Its backend_name() is the backend's.
  const std::shared_ptr<dist::ProcessGroup>& group() const { return group_; }
  int rank() const { return rank_; }
  int size() const { return int(members_.size()); }
  int replica_id() const { return id_; }
  int64_t generation() const { return generation_; }
  // Replica ids of the members, in rank order.
  const std::vector<int>& members() const { return members_; }
  // Steps committed by the job (the same on every member).
  int64_t step() const { return step_; }
  // Membership changes so far seen by this process (heals and joins).
  int64_t heals() const { return heals_; }
  int64_t joins() const { return joins_; }

  // Runs after every membership change, with the new group in place and the
  // state synchronised: rebuild what holds the old group (DDP's reset_group).
  void on_change(std::function<void()> fn) { on_change_.push_back(std::move(fn)); }

  // One step: runs compute (forward and backward); when every member's
  // compute succeeded, runs apply (optimizer step, sampler advance) and
  // counts the step; returns true. When a member was lost, nothing is
  // applied, the membership heals (on_change runs) and false is returned:
  // call again to redo the step. Admitted joiners enter after apply.
  // Note [Elastic commit].
  bool run_step(const std::function<void()>& compute, const std::function<void()>& apply);

 private:
  std::string key(const std::string& k) const;
  std::string step_key(const std::string& k) const;
  bool found(int world_size);
  void join();
  std::string decide(int64_t next_generation);
  void heal();
  void enter(int64_t generation, const std::vector<detail::ElasticMember>& members,
             bool sync_all = false);
  void close_group(bool failed);
  std::string describe_model() const;
  void snapshot_per_rank();  // Note [Elastic per-rank state]
  void exchange_per_rank();

  std::shared_ptr<dist::Store> store_;
  int id_;
  io::Checkpoint& state_;
  ElasticOptions options_;
  std::shared_ptr<const detail::ElasticBackend> backend_;
  std::shared_ptr<detail::GenerationGroup> generation_group_;  // what group_ points to
  std::shared_ptr<dist::ProcessGroup> group_;
  std::vector<int> members_;
  int rank_ = -1;
  int64_t generation_ = -1;
  int64_t step_ = 0;
  int64_t heals_ = 0, joins_ = 0;
  bool has_state_ = true;
  // Note [Elastic per-rank state]: whether this member's per-rank sections
  // hold the job's state, what it sends at the next exchange, and whether
  // that exchange is due.
  bool holds_per_rank_ = true;
  std::optional<std::vector<std::pair<std::string, TensorDict>>> snapshot_;
  bool exchange_due_ = false;
  std::vector<std::function<void()>> on_change_;
};

}  // namespace ddp::parallel
