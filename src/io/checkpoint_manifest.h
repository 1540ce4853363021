#pragma once
// The manifest of a checkpoint directory (checkpoint.json): its contents,
// writing it as text with its own checksum, and reading it back with every
// field checked. See Note [Checkpoint layout] in ddp/io/checkpoint.h.
// Internal to src/io.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ddp/io/checkpoint.h"

namespace ddp::io::detail {

// Section and generator names: 1 to kMaxNameLength of [A-Za-z0-9_-].
inline constexpr size_t kMaxNameLength = 64;
bool valid_checkpoint_name(const std::string& name);

// "<section>.g<generation>.safetensors"
std::string section_file_name(const std::string& section, uint64_t generation);
// "<section>.r<rank>.g<generation>.safetensors" (Note [Per-rank checkpoint
// sections])
std::string per_rank_file_name(const std::string& section, int rank, uint64_t generation);

// Eight lower-case hex digits.
std::string hex32(uint32_t v);

// One safetensors file of a section, as the manifest records it.
struct FileEntry {
  std::string file;
  uint64_t bytes = 0;
  uint32_t crc = 0;
  uint64_t tensors = 0;
};

// A shared section is one file (the FileEntry part); a per-rank section
// has one file per saving rank in `ranks` and an empty FileEntry part.
struct SectionEntry : FileEntry {
  std::string name;
  std::vector<FileEntry> ranks;
  bool per_rank() const { return !ranks.empty(); }
};

struct GeneratorEntry {
  std::string name;
  uint64_t seed = 0, offset = 0;
};

struct Manifest {
  int format_version = 1;  // 2 when it has per-rank sections
  int world_size = 0;      // the saving job's, recorded with per-rank sections
  uint64_t generation = 0;
  int64_t epoch = 0, step = 0;
  Metadata metadata;
  std::vector<SectionEntry> sections;
  std::vector<GeneratorEntry> generators;
};

// The manifest as JSON text, ending in its own CRC32.
std::string render_manifest(const Manifest& m);

// Reads and checks the manifest at `path`: format, version, its checksum
// and every field; IoError naming the file and the field otherwise.
Manifest read_manifest(const std::string& path);

}  // namespace ddp::io::detail
