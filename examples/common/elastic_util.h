#pragma once
// What the fault-tolerant trainers (train_resnet and train_gpt
// --fault-tolerant, docs/fault_tolerance.md) share around a
// parallel::ElasticGroup: its options from ddprun's environment, following
// membership changes (DDP's reset_group, the replica check, the membership
// line), and the per-commit metrics lines. See Note [Fault-tolerant trainer]
// in train_resnet/fault_tolerant.cpp.

#include <cstdint>
#include <optional>
#include <string>

#include "common/metrics.h"
#include "ddp/dist/launch_env.h"
#include "ddp/nn/module.h"
#include "ddp/optim/optimizer.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/elastic.h"

namespace examples {

// min_size, max_size and the job token from ddprun's elastic mode
// (DDP_ELASTIC*); outside it a job of fixed size (min 1, no max).
ddp::parallel::ElasticOptions elastic_options(const ddp::dist::LaunchEnv& env);

// FNV-1a over the bytes of every parameter and optimizer tensor: equal on
// every replica exactly when their states are bit-identical (but for
// collisions).
int64_t state_hash(const ddp::nn::Module& model, const ddp::optim::Optimizer& opt);

// --check-replicas: every member compares its state hash with the others'
// (one allgather on the current group); rank 0 prints
//   "replicas: identical after generation G (N ranks, step S)"
// or "replicas: DIFFER ...", which the chaos run and the kill tests count.
// A failure of the allgather prints "replicas: not checked (why)".
void check_replicas(ddp::parallel::ElasticGroup& elastic, const ddp::nn::Module& model,
                    const ddp::optim::Optimizer& opt);

// Registers what follows every membership change, in this order: DDP moves
// to the new group (reset_group), the replicas compare states (when
// `check`), and rank 0 prints "membership: generation G, N rank(s)
// (replicas a,b,c) at step S". `elastic`, `ddp_model`, `model` and `opt`
// must outlive the group's last change.
void follow_membership(ddp::parallel::ElasticGroup& elastic,
                       ddp::parallel::DistributedDataParallelBase& ddp_model,
                       const ddp::nn::Module& model, const ddp::optim::Optimizer& opt, bool check);

// A process that joined a running job (elastic.joins() > 0 right after the
// ElasticGroup's constructor) says so, and runs its own replica check: the
// members ran theirs in an on_change that ran before its own existed.
void report_join(ddp::parallel::ElasticGroup& elastic, double seconds, const ddp::nn::Module& model,
                 const ddp::optim::Optimizer& opt, bool check);

// Seconds since the Unix epoch (wall time, comparable across processes).
double unix_seconds();

// --metrics FILE of a fault-tolerant trainer: the process that is rank 0 at
// a commit appends one line (full precision: the chaos run reads the time
// to the millisecond)
//   {"step": S, "time": T, "world_size": N, "generation": G, "<count_key>": C}
// with the job's step count after the commit and C the step's real
// samples. Rank 0 may be another process after a heal, so the file is
// opened for appending, by the first commit this process writes.
class CommitLog {
 public:
  CommitLog(std::string path, std::string count_key)
      : path_(std::move(path)), count_key_(std::move(count_key)) {}
  // After a committed step; a no-op without a path or on a rank other than 0.
  void write(const ddp::parallel::ElasticGroup& elastic, int64_t count);

 private:
  std::string path_, count_key_;
  std::optional<MetricsFile> file_;
};

}  // namespace examples
