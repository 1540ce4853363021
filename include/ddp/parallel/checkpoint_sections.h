#pragma once
// The state of a DDP job that is not the same on every rank, or that
// lives in the DDP engine itself, as sections of one io::Checkpoint
// (Note [Per-rank checkpoint sections] in ddp/io/checkpoint.h):
//
//   io::Checkpoint ckpt;
//   ckpt.add("model", model).add("scheduler", sched).add("scaler", scaler);
//   parallel::add_checkpoint_section(ckpt, "optimizer", zero);    // ZeRO-1: every rank's shard
//   parallel::add_checkpoint_section(ckpt, "powersgd", powersgd); // each rank's error memory
//   parallel::add_checkpoint_section(ckpt, "buckets", ddp_model); // the bucket plan
//   io::save_checkpoint(dir, ckpt, parallel::checkpoint_save_options(group, {.step = step}));
//   ...
//   io::load_checkpoint(dir, ckpt, parallel::checkpoint_load_options(*group));
//
// With per-rank sections the save is a collective: every rank calls it,
// with the same directory, which every rank must see (a shared filesystem
// on several nodes).

#include <memory>
#include <string>

#include "ddp/dist/process_group.h"
#include "ddp/dist/store.h"
#include "ddp/io/checkpoint.h"

namespace ddp::parallel {

class DistributedDataParallelBase;
class PowerSGDState;
class ZeroRedundancyOptimizer;

// The exchange save_checkpoint needs for per-rank sections: an allgather of
// one string per rank over `group` (two allgathers, the lengths then the
// bytes). The strings travel on `device`: the CPU for gloo and mpi, a GPU
// for nccl (the current one when `device` is the CPU on an nccl group).
io::Exchange checkpoint_exchange(std::shared_ptr<dist::ProcessGroup> group,
                                 Device device = Device::cpu());

// The same exchange through the job's store instead of a process group: for
// io::AsyncCheckpointer, whose writer thread must not issue collectives
// beside the training's (Note [Asynchronous checkpoints]). Keys live under
// `prefix` and are numbered by call, so create it once and use it for every
// save (every rank the same number of times); each rank removes its keys
// two rounds later. Waits up to the store's timeout for the other ranks.
io::Exchange checkpoint_store_exchange(std::shared_ptr<dist::Store> store, int rank,
                                       int world_size,
                                       const std::string& prefix = "ddp/checkpoint/");

// `options` with this rank, the world size and the exchange filled in.
io::SaveOptions checkpoint_save_options(std::shared_ptr<dist::ProcessGroup> group,
                                        io::SaveOptions options = {},
                                        Device device = Device::cpu());
// `options` with this rank and the world size filled in.
io::LoadOptions checkpoint_load_options(const dist::ProcessGroup& group,
                                        io::LoadOptions options = {});

// ZeRO-1's optimizer state, per rank: each rank saves its shard
// (sharded_state_dict) and a load reassembles the shards of every saving
// rank, at any world size (Note [ZeRO-1 checkpoints]).
void add_checkpoint_section(io::Checkpoint& checkpoint, const std::string& name,
                            ZeroRedundancyOptimizer& zero);

// PowerSGD's state, per rank (Note [PowerSGD checkpoints]): a load takes
// this rank's own error memory, so it needs the saving job's world size
// (ValueError otherwise, naming both; load with strict = false and without
// this section to restart compression with empty memory instead).
void add_checkpoint_section(io::Checkpoint& checkpoint, const std::string& name,
                            std::shared_ptr<PowerSGDState> state);

// The DDP engine's bucket plan (Note [Bucket plans in checkpoints] in
// distributed.h), shared: the same on every rank.
void add_checkpoint_section(io::Checkpoint& checkpoint, const std::string& name,
                            DistributedDataParallelBase& ddp);

}  // namespace ddp::parallel
