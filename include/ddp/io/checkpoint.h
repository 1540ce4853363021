#pragma once
// Training checkpoints: the state of a model, its optimizer, loss scaler,
// scheduler and random generators, plus epoch, step and user metadata, in
// one directory that a later run (or every rank of a DDP job) restores.
//
// Usage:
//   io::Checkpoint ckpt;                  // includes ddp::default_generator()
//   ckpt.add("model", model)              // anything Stateful, see below
//       .add("optimizer", opt)
//       .add("scaler", scaler)
//       .add("scheduler", sched);
//   io::save_checkpoint("run/ckpt", ckpt, {.rank = rank, .epoch = e, .step = s});
//   ...
//   io::CheckpointInfo info = io::load_checkpoint("run/ckpt", ckpt);
//   int64_t first_epoch = info.epoch + 1;
//
// Note [Checkpoint layout]
// A checkpoint is a directory holding
//   checkpoint.json             the manifest: format and version, generation,
//                               epoch, step, generator states, user metadata,
//                               and per section its file, size and CRC32;
//                               it carries its own CRC32 too
//   <section>.g<N>.safetensors  one file per section: the section's
//                               state_dict() under its own keys, readable by
//                               any safetensors reader (torch, numpy, ...)
// where N is the generation, one more than the manifest the save replaces.
// Section files of a new generation never share a name with the files the
// current manifest names, so the manifest is the single commit point; see
// Note [Atomic checkpoints] in checkpoint.cpp.
//
// Note [Checkpoints under DDP]
// io sits below dist (Note [Layering of io]), so it knows no process group:
// save_checkpoint writes only when options.rank == 0 and returns at once on
// other ranks. The caller puts a barrier after the save (before any rank
// reads the checkpoint or the job exits) and may call load_checkpoint on
// every rank. Rank 0's generator states are the ones saved, and every rank
// that loads gets them. State that differs between ranks goes in per-rank
// sections (below), whose save is a collective instead.
//
// Note [Per-rank checkpoint sections]
// Some training state is not the same on every rank: a ZeRO-1 optimizer
// holds only its own shard, PowerSGD's error memory is the residual of the
// rank's own gradient. A per-rank section (add_per_rank) is saved by every
// rank into its own file, <section>.r<R>.g<N>.safetensors, and the one
// manifest rank 0 commits names the files of all ranks (format_version 2,
// with the saving job's world_size). Such a save is a collective: every
// rank calls save_checkpoint with the same directory, its rank, the world
// size and an `exchange` (ddp/parallel/checkpoint_sections.h makes one from
// a process group), and the ranks agree three times through it:
//  1. every rank took its state (else nobody writes anything);
//  2. every rank wrote and fsync'd its files; rank 0 then reads each
//     other rank's files back and checks their size and CRC32 against what
//     that rank reported (so the directory must be one all ranks share,
//     e.g. a network filesystem: a rank writing to a disk rank 0 cannot
//     see is named), and commits the manifest as in Note [Atomic
//     checkpoints];
//  3. whether the commit happened: every rank returns, or every rank
//     throws and removes the files it wrote.
// A load gives each per-rank section a reader of every saving rank's file
// (checked, like the shared files, for size and CRC32 when read), so the
// section takes what it needs: ZeRO-1 reassembles its shards at any world
// size, PowerSGD takes its own rank's memory and refuses another world
// size. A checkpoint without per-rank sections is written as before, by
// rank 0 alone, in format_version 1.

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ddp/tensor/ordered_dict.h"
#include "ddp/tensor/generator.h"

namespace ddp::io {

using Metadata = std::map<std::string, std::string>;

// What a checkpoint section can be: nn::Module, optim::Optimizer,
// optim::LRScheduler, amp::GradScaler or any type of one's own with these
// two members. load_state_dict may return anything (Module's returns its
// LoadResult); the checkpoint ignores it, and Modules load strictly.
template <class T>
concept Stateful = requires(T& object, const T& cobject, const TensorDict& dict) {
  { cobject.state_dict() } -> std::convertible_to<TensorDict>;
  object.load_state_dict(dict);
};

// The objects a checkpoint saves and restores, by reference: they must
// outlive the Checkpoint (or be added by shared_ptr, which it keeps).
class Checkpoint {
 public:
  using SaveFn = std::function<TensorDict()>;
  using LoadFn = std::function<void(const TensorDict&)>;

  // With include_default_generator, ddp::default_generator() is added
  // under the name "default".
  explicit Checkpoint(bool include_default_generator = true);

  // Adds a section. Names are 1-64 characters of [A-Za-z0-9_-], unique
  // among the sections; ValueError otherwise.
  template <Stateful T>
  Checkpoint& add(const std::string& name, T& object) {
    return add(
        name, [&object] { return TensorDict(object.state_dict()); },
        [&object](const TensorDict& d) { object.load_state_dict(d); });
  }
  template <Stateful T>
  Checkpoint& add(const std::string& name, std::shared_ptr<T> object) {
    check_not_null(name, object.get());
    return add(
        name, [object] { return TensorDict(object->state_dict()); },
        [object](const TensorDict& d) { object->load_state_dict(d); });
  }
  // The type-erased form: `save` returns the section's tensors, `load`
  // restores them and throws (any ddp::Error) when they do not fit.
  Checkpoint& add(const std::string& name, SaveFn save, LoadFn load);

  // What a per-rank section's load sees (Note [Per-rank checkpoint
  // sections]): the saving job's world size, this job's rank and world
  // size (LoadOptions), and a reader of each saving rank's tensors (the
  // file's size and CRC32 checked; IoError naming the file otherwise).
  struct RankFiles {
    int saved_world_size = 0;
    int rank = 0;
    int world_size = 1;
    std::function<TensorDict(int saved_rank)> read;
    // Set when the states come from live peers after a membership change
    // (ddp::parallel::ElasticGroup, Note [Elastic per-rank state] in
    // ddp/parallel/elastic.h), not from a checkpoint: `read` gives what the
    // members that held the job's state sent (saved_world_size of them, in
    // rank order), the states of lost members are missing, and `own` is the
    // index of this member's own state (-1 for a member that had none).
    bool from_peers = false;
    int own = -1;
  };
  using LoadPerRankFn = std::function<void(const RankFiles&)>;
  // Adds a per-rank section: `save` gives this rank's tensors; `load` takes
  // them from the files of the saving job and must check everything before
  // it changes anything; `restore` puts back what `save` gave (undoing the
  // load when a later section refuses, Note [Transactional load]).
  // ddp/parallel/checkpoint_sections.h adds ZeRO-1 and PowerSGD this way.
  // `peer_save`, when given, is what a member sends its peers after a
  // membership change instead of `save` (ZeRO-1 adds the values of its
  // segments, which a checkpoint has in the model section already).
  Checkpoint& add_per_rank(const std::string& name, SaveFn save, LoadPerRankFn load,
                           LoadFn restore, SaveFn peer_save = nullptr);

  // Adds a random generator, saved as its (seed, offset); same naming rules
  // as sections, in a namespace of their own.
  Checkpoint& add_generator(const std::string& name, Generator& generator);

  struct Section {
    std::string name;
    SaveFn save;
    LoadFn load;  // for a per-rank section, its restore
    LoadPerRankFn load_per_rank;  // set only for a per-rank section
    SaveFn peer_save;             // optional, per-rank sections only
    bool per_rank() const { return bool(load_per_rank); }
    TensorDict save_for_peers() const { return peer_save ? peer_save() : save(); }
  };
  bool has_per_rank_sections() const;
  const std::vector<Section>& sections() const { return sections_; }
  const std::vector<std::pair<std::string, Generator*>>& generators() const { return generators_; }

 private:
  void check_name(const std::string& name, const char* what, bool generator) const;
  static void check_not_null(const std::string& name, const void* p);

  std::vector<Section> sections_;
  std::vector<std::pair<std::string, Generator*>> generators_;
};

// Gathers one string from every rank, in rank order, on every rank: a
// collective (ddp/parallel/checkpoint_sections.h builds one on a process
// group). io knows no process group (Note [Checkpoints under DDP]).
using Exchange = std::function<std::vector<std::string>(const std::string& mine)>;

struct SaveOptions {
  int rank = 0;            // only rank 0 writes; see Note [Checkpoints under DDP]
  int64_t epoch = 0;       // >= 0
  int64_t step = 0;        // >= 0
  Metadata metadata = {};  // free-form strings, returned by load_checkpoint
  // For per-rank sections only (Note [Per-rank checkpoint sections]): the
  // number of ranks, and how they agree; `exchange` is needed when
  // world_size > 1.
  int world_size = 1;
  Exchange exchange = {};
};

struct LoadOptions {
  // With strict, a section or generator of the Checkpoint that the file
  // lacks, or one in the file that the Checkpoint lacks, is an error.
  // Otherwise missing ones are left as they are and extra ones ignored.
  bool strict = true;
  // This rank and the job's world size, given to per-rank sections.
  int rank = 0;
  int world_size = 1;
};

struct CheckpointInfo {
  int format_version = 0;
  uint64_t generation = 0;
  int64_t epoch = 0;
  int64_t step = 0;
  Metadata metadata;
  std::vector<std::string> sections;    // in the file, in order (per-rank ones too)
  std::vector<std::string> per_rank_sections;  // those of them saved per rank
  std::vector<std::string> generators;  // in the file, in order
  int world_size = 0;  // of the saving job; 0 when it had no per-rank sections
};

// The manifest's name inside a checkpoint directory, and the newest version
// this build writes: 1 without per-rank sections, 2 with them. It reads
// both.
inline constexpr const char* kCheckpointManifest = "checkpoint.json";
inline constexpr int kCheckpointFormatVersion = 2;

// Writes every section's state_dict() and the generator states into `dir`
// (created if missing, parents included) when options.rank == 0; returns at
// once on other ranks, unless the checkpoint has per-rank sections: then
// every rank writes its own and the call is a collective (Note [Per-rank
// checkpoint sections]), which returns on every rank or throws on every
// rank. The previous checkpoint in `dir` stays loadable until
// the new one is complete and durable (fsync'd), and is then removed; a save
// that fails (a section that throws, a full disk) leaves it untouched and
// removes what it wrote. ValueError for bad options, IoError for files.
void save_checkpoint(const std::string& dir, const Checkpoint& checkpoint,
                     const SaveOptions& options = {});

// Restores every section and generator from `dir` and returns the epoch,
// step and metadata. Everything in the files is checked first (manifest,
// format version, sizes, CRC32 checksums, the safetensors themselves);
// then the sections are loaded in order, and if one refuses its tensors
// (a wrong model: missing or extra keys, other shapes) the sections loaded
// before it are put back, so a failed load changes nothing. Errors name the
// file and the first bad entry: IoError for missing, truncated or corrupt
// files, ValueError (ShapeError for shapes) for checkpoints that do not fit.
CheckpointInfo load_checkpoint(const std::string& dir, Checkpoint& checkpoint,
                               const LoadOptions& options = {});

// Reads and verifies only the manifest of `dir` (not the section files).
CheckpointInfo read_checkpoint_info(const std::string& dir);

}  // namespace ddp::io
