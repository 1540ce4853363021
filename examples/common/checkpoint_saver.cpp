#include "common/checkpoint_saver.h"

#include <chrono>
#include <cstdio>

#include "ddp/core/error.h"
#include "ddp/parallel/checkpoint_sections.h"

namespace examples {

CheckpointSaver::CheckpointSaver(ddp::dist::World& world, bool async,
                                 const ddp::io::Checkpoint& checkpoint)
    : world_(world) {
  if (!async) return;
  if (checkpoint.has_per_rank_sections() && world.size() > 1) {
    if (!world.store)
      throw ddp::ValueError(
          "--async-checkpoint: this checkpoint has per-rank sections, whose background save "
          "agrees through the job's store, and this job has none (an mpi job started without "
          "MASTER_ADDR and MASTER_PORT); set them, or save synchronously");
    store_exchange_ =
        ddp::parallel::checkpoint_store_exchange(world.store, world.rank(), world.size());
  }
  saver_.emplace();
}

void CheckpointSaver::save(const std::string& dir, const ddp::io::Checkpoint& checkpoint,
                           ddp::io::SaveOptions options, bool last) {
  const auto start = std::chrono::steady_clock::now();
  if (saver_) {
    options.rank = world_.rank();
    options.world_size = world_.size();
    options.exchange = store_exchange_;
    saver_->save(dir, checkpoint, options);
    if (last) saver_->wait();
  } else {
    ddp::io::save_checkpoint(dir, checkpoint,
                             ddp::parallel::checkpoint_save_options(world_.group, options));
  }
  last_stall_s_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  total_stall_s_ += last_stall_s_;
  // Nobody reads or exits before rank 0 is done (Note [Checkpoints under
  // DDP]); a background save is waited for only at the end.
  if (!saver_ || last) world_.group->barrier()->wait();
  if (world_.rank() != 0) return;
  if (saver_ && !last)
    std::printf("checkpoint of step %lld being written to %s (the step waited %.3f s)\n",
                (long long)options.step, dir.c_str(), last_stall_s_);
  else
    std::printf("saved checkpoint at step %lld to %s\n", (long long)options.step, dir.c_str());
}

void report_preemption(const ddp::dist::World& world,
                       const ddp::parallel::PreemptionWatcher& watcher, int64_t step) {
  if (world.rank() != 0) return;
  std::printf("preempted by %s: every rank stopped at step %lld and the checkpoint is saved; "
              "--resume continues from it\n",
              ddp::parallel::PreemptionWatcher::signal_name(watcher.signal_number()).c_str(),
              (long long)step);
}

std::unique_ptr<ddp::parallel::PreemptionWatcher> watch_preemption(ddp::dist::World& world,
                                                                   bool checkpointing) {
  std::unique_ptr<ddp::parallel::PreemptionWatcher> watcher;
  if (!checkpointing) return watcher;
  if (world.size() == 1)
    watcher = std::make_unique<ddp::parallel::PreemptionWatcher>();
  else if (world.store)
    watcher = std::make_unique<ddp::parallel::PreemptionWatcher>(world.store, world.rank(),
                                                                 world.size());
  else if (world.rank() == 0)
    std::printf("note: this job has no store (mpi without MASTER_ADDR), so preemption signals "
                "end it without a checkpoint\n");
  return watcher;
}

}  // namespace examples
