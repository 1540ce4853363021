// Training checkpoints (checkpoint.h): the manifest, atomic and durable
// writes, verification and transactional loading.

#include "ddp/io/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <regex>
#include <unordered_set>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/io/safetensors.h"
#include "io/checkpoint_manifest.h"
#include "io/crc32.h"
#include "io/file.h"

namespace ddp::io {

namespace fs = std::filesystem;

// Note [Atomic checkpoints]
// A save must never leave `dir` without a loadable checkpoint, whatever
// fails (an exception, a full disk, a crash, a power cut). So:
//  1. every section's state_dict() is taken first; a section that throws
//     stops the save before any file is touched;
//  2. the section files are written under the next generation's names
//     (<section>.g<N+1>.safetensors), which the current manifest never
//     names, and each is fsync'd; the checksum is computed from the bytes
//     read back from the file, so it describes what is on disk;
//  3. the directory is fsync'd, so the new names are durable;
//  4. the manifest is written to checkpoint.json.tmp.<pid>, fsync'd and
//     renamed over checkpoint.json (the commit point: rename is atomic), and
//     the directory is fsync'd again;
//  5. only then are the previous generation's files (and leftovers of
//     crashed saves) removed.
// A failure before 4 removes the new files and leaves the old manifest
// and files as they were; a crash leaves at worst unreferenced files, which
// the next successful save removes.

namespace {

// See Note [Checkpoint layout]; the manifest lives in checkpoint_manifest.cpp.
using detail::GeneratorEntry;
using detail::hex32;
using detail::Manifest;
using detail::SectionEntry;

// Rethrows the exception in flight as the same ddp::Error type with
// `context` in front of its message (which keeps its file:line at the end);
// anything else passes through unchanged.
[[noreturn]] void rethrow_with_context(std::exception_ptr ep, const std::string& context) {
  try {
    std::rethrow_exception(ep);
  } catch (const ShapeError& e) {
    throw ShapeError(context + ": " + e.what());
  } catch (const ValueError& e) {
    throw ValueError(context + ": " + e.what());
  } catch (const IoError& e) {
    throw IoError(context + ": " + e.what());
  } catch (const Error& e) {
    throw Error(context + ": " + e.what());
  }
}

// fsync of a file or directory by path; IoError on failure.
void fsync_path(const std::string& path, bool directory) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) DDP_THROW(IoError, "cannot open '{}' to sync it: {}", path, std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) DDP_THROW(IoError, "fsync of '{}' failed: {}", path, std::strerror(err));
}

// Writes `text` to path.tmp.<pid>, fsyncs it and renames it over `path`.
// The caller fsyncs the directory. Nothing is left behind on failure.
void write_and_rename(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd;
  do {
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0)
    DDP_THROW(IoError, "cannot create '{}' (to write '{}'): {}", tmp, path, std::strerror(errno));
  auto fail = [&](const char* what) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    DDP_THROW(IoError, "{} '{}' failed: {}", what, tmp, std::strerror(err));
  };
  const char* p = text.data();
  size_t n = text.size();
  while (n > 0) {
    ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail("writing");
    p += put;
    n -= size_t(put);
  }
  if (::fsync(fd) != 0) fail("fsync of");
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) fail("closing");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(("renaming to '" + path + "' of").c_str());
}

struct Digest {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

Digest digest_file(const std::string& path) {
  detail::ReadFile f(path);
  Digest d{f.size(), 0};
  std::vector<char> buf(size_t(1) << 20);
  for (uint64_t off = 0; off < d.bytes;) {
    size_t n = size_t(std::min<uint64_t>(buf.size(), d.bytes - off));
    f.read_at(off, buf.data(), n);
    d.crc = detail::crc32(d.crc, buf.data(), n);
    off += n;
  }
  return d;
}

CheckpointInfo info_of(const Manifest& m) {
  CheckpointInfo info;
  info.format_version = kCheckpointFormatVersion;
  info.generation = m.generation;
  info.epoch = m.epoch;
  info.step = m.step;
  info.metadata = m.metadata;
  for (const SectionEntry& e : m.sections) info.sections.push_back(e.name);
  for (const GeneratorEntry& g : m.generators) info.generators.push_back(g.name);
  return info;
}

std::string names(const std::vector<std::string>& v) {
  return v.empty() ? "none" : fmt::format("{}", fmt::join(v, ", "));
}

// Removes files of other generations and leftovers of interrupted saves;
// `keep` are the files of the manifest just committed. Failures are logged.
void remove_stale_files(const std::string& dir, const std::unordered_set<std::string>& keep) {
  static const std::regex stale(
      R"(([A-Za-z0-9_-]{1,64}\.g[0-9]+\.safetensors|checkpoint\.json)(\.tmp\.[0-9]+)?)");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name == kCheckpointManifest || keep.count(name) || !std::regex_match(name, stale) ||
        !entry.is_regular_file(ec))
      continue;
    if (::unlink(entry.path().c_str()) != 0 && errno != ENOENT)
      DDP_LOG_WARNING("save_checkpoint: cannot remove the stale file '{}': {}",
                      entry.path().string(), std::strerror(errno));
  }
  if (ec) DDP_LOG_WARNING("save_checkpoint: cannot list '{}': {}", dir, ec.message());
}

TensorDict cpu_copy(const TensorDict& d) {
  TensorDict out;
  for (const auto& [k, t] : d)
    out.insert(k, !t.defined() ? t : t.device().is_cpu() ? t.detach().clone() : t.detach().cpu());
  return out;
}

}  // namespace

// ---- Checkpoint -----------------------------------------------------------------------

Checkpoint::Checkpoint(bool include_default_generator) {
  if (include_default_generator) add_generator("default", default_generator());
}

void Checkpoint::check_name(const std::string& name, const char* what, bool generator) const {
  DDP_CHECK(detail::valid_checkpoint_name(name),
            "Checkpoint: {} name '{}' must be 1 to {} characters of A-Z, a-z, 0-9, '_' and '-'",
            what, name, detail::kMaxNameLength);
  bool taken = false;
  if (generator) {
    for (const auto& g : generators_) taken = taken || g.first == name;
  } else {
    for (const auto& s : sections_) taken = taken || s.name == name;
  }
  DDP_CHECK(!taken, "Checkpoint: {} '{}' was added already", what, name);
}

void Checkpoint::check_not_null(const std::string& name, const void* p) {
  DDP_CHECK(p != nullptr, "Checkpoint: section '{}' is a null pointer", name);
}

Checkpoint& Checkpoint::add(const std::string& name, SaveFn save, LoadFn load) {
  check_name(name, "section", false);
  DDP_CHECK(save && load, "Checkpoint: section '{}' needs both a save and a load function", name);
  sections_.push_back({name, std::move(save), std::move(load)});
  return *this;
}

Checkpoint& Checkpoint::add_generator(const std::string& name, Generator& generator) {
  check_name(name, "generator", true);
  generators_.emplace_back(name, &generator);
  return *this;
}

// ---- save -------------------------------------------------------------------------------

void save_checkpoint(const std::string& dir, const Checkpoint& checkpoint,
                     const SaveOptions& options) {
  DDP_CHECK(options.rank >= 0, "save_checkpoint: rank must be >= 0, got {}", options.rank);
  if (options.rank != 0) return;  // See Note [Checkpoints under DDP].
  DDP_CHECK(options.epoch >= 0 && options.step >= 0,
            "save_checkpoint: epoch and step must be >= 0, got epoch {} and step {}", options.epoch,
            options.step);
  DDP_CHECK(!dir.empty(), "save_checkpoint: the directory name is empty");

  // 1. Every section's state, before any file is touched.
  std::vector<TensorDict> dicts;
  for (const Checkpoint::Section& s : checkpoint.sections()) {
    try {
      dicts.push_back(s.save());
    } catch (...) {
      rethrow_with_context(std::current_exception(),
                           fmt::format("save_checkpoint '{}': section '{}' failed to give its "
                                       "state; nothing was written",
                                       dir, s.name));
    }
  }
  Manifest m;
  m.epoch = options.epoch;
  m.step = options.step;
  m.metadata = options.metadata;
  for (const auto& [name, gen] : checkpoint.generators())
    m.generators.push_back({name, gen->seed(), gen->offset()});

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    DDP_THROW(IoError, "save_checkpoint: cannot create the directory '{}': {}", dir, ec.message());
  const std::string manifest_path = (fs::path(dir) / kCheckpointManifest).string();
  m.generation = 1;
  if (fs::exists(manifest_path, ec)) {
    try {
      m.generation = detail::read_manifest(manifest_path).generation + 1;
    } catch (const Error& e) {
      DDP_LOG_WARNING("save_checkpoint: replacing an unreadable checkpoint: {}", e.what());
    }
  }

  // 2-4. See Note [Atomic checkpoints].
  std::vector<std::string> written;
  try {
    for (size_t i = 0; i < dicts.size(); ++i) {
      SectionEntry e;
      e.name = checkpoint.sections()[i].name;
      e.file = detail::section_file_name(e.name, m.generation);
      std::string path = (fs::path(dir) / e.file).string();
      written.push_back(path);
      try {
        save_safetensors(path, dicts[i], {{"format", "pt"}, {"ddp.checkpoint.section", e.name}});
      } catch (...) {
        rethrow_with_context(
            std::current_exception(),
            fmt::format("save_checkpoint: writing section '{}' to '{}'", e.name, path));
      }
      fsync_path(path, false);
      Digest d = digest_file(path);
      e.bytes = d.bytes;
      e.crc = d.crc;
      e.tensors = dicts[i].size();
      m.sections.push_back(std::move(e));
    }
    fsync_path(dir, true);
    write_and_rename(manifest_path, detail::render_manifest(m));
  } catch (...) {
    for (const std::string& path : written)
      if (::unlink(path.c_str()) != 0 && errno != ENOENT)
        DDP_LOG_WARNING("save_checkpoint: cannot remove '{}' of the failed save: {}", path,
                        std::strerror(errno));
    throw;
  }
  // Committed: the new manifest is in place.
  fsync_path(dir, true);
  std::unordered_set<std::string> keep;
  for (const SectionEntry& e : m.sections) keep.insert(e.file);
  remove_stale_files(dir, keep);
}

// ---- load -------------------------------------------------------------------------------

CheckpointInfo read_checkpoint_info(const std::string& dir) {
  return info_of(detail::read_manifest((fs::path(dir) / kCheckpointManifest).string()));
}

CheckpointInfo load_checkpoint(const std::string& dir, Checkpoint& checkpoint,
                               const LoadOptions& options) {
  const std::string manifest_path = (fs::path(dir) / kCheckpointManifest).string();
  std::error_code ec;
  if (!fs::exists(manifest_path, ec))
    DDP_THROW(IoError, "load_checkpoint: no checkpoint in '{}' ('{}' does not exist)", dir,
              manifest_path);
  Manifest m = detail::read_manifest(manifest_path);
  CheckpointInfo info = info_of(m);

  // Sections and generators on both sides.
  struct Match {
    const Checkpoint::Section* section;
    const SectionEntry* entry;
    TensorDict tensors;
  };
  std::vector<Match> matches;
  std::vector<std::string> mine;
  for (const Checkpoint::Section& s : checkpoint.sections()) {
    mine.push_back(s.name);
    const SectionEntry* found = nullptr;
    for (const SectionEntry& e : m.sections)
      if (e.name == s.name) found = &e;
    DDP_CHECK(found || !options.strict, "load_checkpoint: '{}' has no section '{}' (it has: {})",
              manifest_path, s.name, names(info.sections));
    if (found) matches.push_back({&s, found, {}});
  }
  for (const SectionEntry& e : m.sections)
    DDP_CHECK(!options.strict || std::find(mine.begin(), mine.end(), e.name) != mine.end(),
              "load_checkpoint: '{}' has a section '{}' that the Checkpoint lacks (it has: {}); "
              "add it, or load with strict = false",
              manifest_path, e.name, names(mine));
  std::vector<std::pair<Generator*, const GeneratorEntry*>> gens;
  std::vector<std::string> my_gens;
  for (const auto& [name, gen] : checkpoint.generators()) {
    my_gens.push_back(name);
    const GeneratorEntry* found = nullptr;
    for (const GeneratorEntry& g : m.generators)
      if (g.name == name) found = &g;
    DDP_CHECK(found || !options.strict, "load_checkpoint: '{}' has no generator '{}' (it has: {})",
              manifest_path, name, names(info.generators));
    if (found) gens.emplace_back(gen, found);
  }
  for (const GeneratorEntry& g : m.generators)
    DDP_CHECK(!options.strict || std::find(my_gens.begin(), my_gens.end(), g.name) != my_gens.end(),
              "load_checkpoint: '{}' has a generator '{}' that the Checkpoint lacks (it has: {})",
              manifest_path, g.name, names(my_gens));

  // Every file: size, checksum, and a valid safetensors file.
  for (Match& mt : matches) {
    const SectionEntry& e = *mt.entry;
    const std::string path = (fs::path(dir) / e.file).string();
    Digest d = digest_file(path);
    DDP_CHECK_T(IoError, d.bytes == e.bytes,
                "load_checkpoint: '{}' (section '{}') is {} bytes, the manifest records {}{}", path,
                e.name, d.bytes, e.bytes, d.bytes < e.bytes ? " (truncated)" : "");
    DDP_CHECK_T(IoError, d.crc == e.crc,
                "load_checkpoint: '{}' (section '{}') is corrupt: its CRC32 is {}, the manifest "
                "records {}",
                path, e.name, hex32(d.crc), hex32(e.crc));
    mt.tensors = load_safetensors(path);
    DDP_CHECK_T(IoError, mt.tensors.size() == e.tensors,
                "load_checkpoint: '{}' (section '{}') holds {} tensors, the manifest records {}",
                path, e.name, mt.tensors.size(), e.tensors);
  }

  // Note [Transactional load]
  // A section's load_state_dict may refuse its tensors (the wrong model)
  // after earlier sections took theirs. Module, Optimizer and LRScheduler
  // check before they change anything, but a section of the user's may
  // not, so each section's current state is copied (to the host) before it
  // loads, and on failure every section tried so far gets its copy back.
  // That costs one host copy of the state, once per load.
  std::vector<TensorDict> saved;
  size_t i = 0;
  try {
    for (; i < matches.size(); ++i) {
      saved.push_back(cpu_copy(matches[i].section->save()));
      matches[i].section->load(matches[i].tensors);
    }
  } catch (...) {
    std::exception_ptr ep = std::current_exception();
    for (size_t k = 0; k < saved.size(); ++k) {
      try {
        matches[k].section->load(saved[k]);
      } catch (const std::exception& e) {
        DDP_LOG_ERROR("load_checkpoint: could not restore section '{}' after a failed load: {}",
                      matches[k].section->name, e.what());
      }
    }
    const SectionEntry& e = *matches[i].entry;
    rethrow_with_context(ep, fmt::format("load_checkpoint: section '{}' of '{}' does not fit; "
                                         "nothing was loaded",
                                         e.name, (fs::path(dir) / e.file).string()));
  }
  for (const auto& [gen, entry] : gens) gen->set_state(entry->seed, entry->offset);
  return info;
}

}  // namespace ddp::io
