#pragma once
// The trainers' checkpoint saves: synchronous (every rank waits for the
// files), or with --async-checkpoint in the background (io::AsyncCheckpointer,
// Note [Asynchronous checkpoints]: the step waits only for the snapshot).

#include <memory>
#include <optional>
#include <string>

#include "ddp/dist/init.h"
#include "ddp/io/async_checkpoint.h"
#include "ddp/io/checkpoint.h"
#include "ddp/parallel/preemption.h"

namespace examples {

class CheckpointSaver {
 public:
  // With per-rank sections in `checkpoint` an asynchronous saver agrees
  // through the job's store (parallel::checkpoint_store_exchange), so it
  // needs one: ValueError naming --async-checkpoint for an mpi job started
  // without MASTER_ADDR.
  CheckpointSaver(ddp::dist::World& world, bool async, const ddp::io::Checkpoint& checkpoint);

  // Saves at a step boundary; rank, world size and exchange are filled in.
  // `last`: the run's final save, waited for (and a barrier after it, so no
  // rank reads or exits before the files are complete). Rank 0 prints a line
  // saying so.
  void save(const std::string& dir, const ddp::io::Checkpoint& checkpoint,
            ddp::io::SaveOptions options, bool last);

  bool async() const { return saver_.has_value(); }
  // The training thread's time in save(), over the whole run and the last one.
  double total_stall_s() const { return total_stall_s_; }
  double last_stall_s() const { return last_stall_s_; }

 private:
  ddp::dist::World& world_;
  ddp::io::Exchange store_exchange_;
  std::optional<ddp::io::AsyncCheckpointer> saver_;
  double total_stall_s_ = 0, last_stall_s_ = 0;
};

// Note [Trainer preemption]
// With a checkpoint directory the trainers watch for preemption: SIGTERM,
// SIGUSR1 or SIGUSR2 to any rank (or to ddprun, which forwards it) makes
// every rank stop at one agreed step (Note [Agreeing on a stop step]), save
// the checkpoint there and exit 0, so `--resume` continues from it. A job of
// several ranks agrees through its store; one without (mpi started without
// MASTER_ADDR) keeps the signals' default action, and rank 0 says so.
// Without a checkpoint directory there is nothing to save, and the signals
// end the process as before.
std::unique_ptr<ddp::parallel::PreemptionWatcher> watch_preemption(ddp::dist::World& world,
                                                                   bool checkpointing);
// Rank 0's line after a preempted run saved its checkpoint at `step`.
void report_preemption(const ddp::dist::World& world,
                       const ddp::parallel::PreemptionWatcher& watcher, int64_t step);

}  // namespace examples
