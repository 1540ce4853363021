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
// that loads gets them.

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

  // Adds a random generator, saved as its (seed, offset); same naming rules
  // as sections, in a namespace of their own.
  Checkpoint& add_generator(const std::string& name, Generator& generator);

  struct Section {
    std::string name;
    SaveFn save;
    LoadFn load;
  };
  const std::vector<Section>& sections() const { return sections_; }
  const std::vector<std::pair<std::string, Generator*>>& generators() const { return generators_; }

 private:
  void check_name(const std::string& name, const char* what, bool generator) const;
  static void check_not_null(const std::string& name, const void* p);

  std::vector<Section> sections_;
  std::vector<std::pair<std::string, Generator*>> generators_;
};

struct SaveOptions {
  int rank = 0;            // only rank 0 writes; see Note [Checkpoints under DDP]
  int64_t epoch = 0;       // >= 0
  int64_t step = 0;        // >= 0
  Metadata metadata = {};  // free-form strings, returned by load_checkpoint
};

struct LoadOptions {
  // With strict, a section or generator of the Checkpoint that the file
  // lacks, or one in the file that the Checkpoint lacks, is an error.
  // Otherwise missing ones are left as they are and extra ones ignored.
  bool strict = true;
};

struct CheckpointInfo {
  int format_version = 0;
  uint64_t generation = 0;
  int64_t epoch = 0;
  int64_t step = 0;
  Metadata metadata;
  std::vector<std::string> sections;    // in the file, in order
  std::vector<std::string> generators;  // in the file, in order
};

// The manifest's name inside a checkpoint directory, and the version this
// build writes (and the only one it reads).
inline constexpr const char* kCheckpointManifest = "checkpoint.json";
inline constexpr int kCheckpointFormatVersion = 1;

// Writes every section's state_dict() and the generator states into `dir`
// (created if missing, parents included) when options.rank == 0; returns at
// once on other ranks. The previous checkpoint in `dir` stays loadable until
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
