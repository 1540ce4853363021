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

// Eight lower-case hex digits.
std::string hex32(uint32_t v);

struct SectionEntry {
  std::string name, file;
  uint64_t bytes = 0;
  uint32_t crc = 0;
  uint64_t tensors = 0;
};

struct GeneratorEntry {
  std::string name;
  uint64_t seed = 0, offset = 0;
};

struct Manifest {
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
