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
#include <sstream>
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
  info.format_version = m.format_version;
  info.generation = m.generation;
  info.epoch = m.epoch;
  info.step = m.step;
  info.metadata = m.metadata;
  info.world_size = m.world_size;
  for (const SectionEntry& e : m.sections) {
    info.sections.push_back(e.name);
    if (e.per_rank()) info.per_rank_sections.push_back(e.name);
  }
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
      R"(([A-Za-z0-9_-]{1,64}(\.r[0-9]+)?\.g[0-9]+\.safetensors|checkpoint\.json)(\.tmp\.[0-9]+)?)");
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

void remove_files(const std::vector<std::string>& written) {
  for (const std::string& path : written)
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      DDP_LOG_WARNING("save_checkpoint: cannot remove '{}' of the failed save: {}", path,
                      std::strerror(errno));
}

// Writes one section file, fsyncs it and describes it from the bytes on
// disk (Note [Atomic checkpoints], step 2). `written` gets the path first,
// so that a failure removes what was written.
detail::FileEntry write_section_file(const std::string& dir, const std::string& section,
                                     const std::string& file, const TensorDict& dict,
                                     std::vector<std::string>& written) {
  const std::string path = (fs::path(dir) / file).string();
  written.push_back(path);
  try {
    save_safetensors(path, dict, {{"format", "pt"}, {"ddp.checkpoint.section", section}});
  } catch (...) {
    rethrow_with_context(std::current_exception(),
                         fmt::format("save_checkpoint: writing section '{}' to '{}'", section, path));
  }
  fsync_path(path, false);
  Digest d = digest_file(path);
  return {file, d.bytes, d.crc, dict.size()};
}

// The generation the next save writes: one more than the current manifest's.
uint64_t next_generation(const std::string& manifest_path) {
  std::error_code ec;
  if (!fs::exists(manifest_path, ec)) return 1;
  try {
    return detail::read_manifest(manifest_path).generation + 1;
  } catch (const Error& e) {
    DDP_LOG_WARNING("save_checkpoint: replacing an unreadable checkpoint: {}", e.what());
    return 1;
  }
}

void create_directory(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    DDP_THROW(IoError, "save_checkpoint: cannot create the directory '{}': {}", dir, ec.message());
}

// After the commit: the new names durable, then the files of other
// generations removed (Note [Atomic checkpoints], step 5).
void finish_commit(const std::string& dir, const Manifest& m) {
  fsync_path(dir, true);
  std::unordered_set<std::string> keep;
  for (const SectionEntry& e : m.sections) {
    if (!e.per_rank()) keep.insert(e.file);
    for (const detail::FileEntry& f : e.ranks) keep.insert(f.file);
  }
  remove_stale_files(dir, keep);
}

// Every section's state this rank saves (all of them on rank 0, the
// per-rank ones elsewhere), before any file is touched; empty dicts for
// the sections it does not save.
std::vector<TensorDict> take_states(const std::string& dir, const Checkpoint& checkpoint, int rank) {
  std::vector<TensorDict> dicts;
  for (const Checkpoint::Section& s : checkpoint.sections()) {
    dicts.emplace_back();
    if (rank != 0 && !s.per_rank()) continue;
    try {
      dicts.back() = s.save();
    } catch (...) {
      rethrow_with_context(std::current_exception(),
                           fmt::format("save_checkpoint '{}': section '{}' failed to give its "
                                       "state; nothing was written",
                                       dir, s.name));
    }
  }
  return dicts;
}

// The manifest's fields that only rank 0 knows.
Manifest manifest_head(const Checkpoint& checkpoint, const SaveOptions& options) {
  Manifest m;
  m.epoch = options.epoch;
  m.step = options.step;
  m.metadata = options.metadata;
  for (const auto& [name, gen] : checkpoint.generators())
    m.generators.push_back({name, gen->seed(), gen->offset()});
  return m;
}

// Rank 0's save of a checkpoint without per-rank sections.
void save_alone(const std::string& dir, const Checkpoint& checkpoint, const SaveOptions& options) {
  std::vector<TensorDict> dicts = take_states(dir, checkpoint, 0);
  Manifest m = manifest_head(checkpoint, options);
  create_directory(dir);
  const std::string manifest_path = (fs::path(dir) / kCheckpointManifest).string();
  m.generation = next_generation(manifest_path);
  std::vector<std::string> written;
  try {
    for (size_t i = 0; i < dicts.size(); ++i) {
      SectionEntry e;
      e.name = checkpoint.sections()[i].name;
      static_cast<detail::FileEntry&>(e) = write_section_file(
          dir, e.name, detail::section_file_name(e.name, m.generation), dicts[i], written);
      m.sections.push_back(std::move(e));
    }
    fsync_path(dir, true);
    write_and_rename(manifest_path, detail::render_manifest(m));
  } catch (...) {
    remove_files(written);
    throw;
  }
  finish_commit(dir, m);
}

// A section file's tensors, after checking its size, CRC32 and tensor count
// against the manifest; IoError naming the file otherwise.
TensorDict read_section_file(const std::string& dir, const std::string& section,
                             const detail::FileEntry& e) {
  const std::string path = (fs::path(dir) / e.file).string();
  Digest d = digest_file(path);
  DDP_CHECK_T(IoError, d.bytes == e.bytes,
              "load_checkpoint: '{}' (section '{}') is {} bytes, the manifest records {}{}", path,
              section, d.bytes, e.bytes, d.bytes < e.bytes ? " (truncated)" : "");
  DDP_CHECK_T(IoError, d.crc == e.crc,
              "load_checkpoint: '{}' (section '{}') is corrupt: its CRC32 is {}, the manifest "
              "records {}",
              path, section, hex32(d.crc), hex32(e.crc));
  TensorDict tensors = load_safetensors(path);
  DDP_CHECK_T(IoError, tensors.size() == e.tensors,
              "load_checkpoint: '{}' (section '{}') holds {} tensors, the manifest records {}",
              path, section, tensors.size(), e.tensors);
  return tensors;
}

// ---- the collective save (Note [Per-rank checkpoint sections]) ------------------------
// Each round's message is "+" and a payload, or "-" and the rank's error.

std::string ok_message(const std::string& payload = "") { return "+" + payload; }

std::string error_message(std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return std::string("-") + e.what();
  } catch (...) {
    return "-an unknown exception";
  }
}

// Every rank throws when any rank failed the round: the failed rank its
// own exception, the others an Error naming the first rank that failed.
void agree(const std::vector<std::string>& replies, std::exception_ptr mine, const std::string& dir,
           const char* round, int world_size) {
  if (mine) std::rethrow_exception(mine);
  DDP_CHECK_T(Error, replies.size() == size_t(world_size),
              "save_checkpoint '{}': the exchange gave {} replies for {} ranks", dir,
              replies.size(), world_size);
  for (size_t r = 0; r < replies.size(); ++r)
    if (replies[r].empty() || replies[r][0] != '+')
      DDP_THROW(Error, "save_checkpoint '{}': rank {} failed {}: {}", dir, r, round,
                replies[r].empty() ? std::string("(no reason given)") : replies[r].substr(1));
}

std::string per_rank_names(const Checkpoint& checkpoint) {
  std::string out;
  for (const Checkpoint::Section& s : checkpoint.sections())
    if (s.per_rank()) out += (out.empty() ? "" : " ") + s.name;
  return out;
}

// "<name> <bytes> <crc32> <tensors>" per line: what a rank reports it wrote.
std::string describe_files(const std::vector<std::pair<std::string, detail::FileEntry>>& files) {
  std::string out;
  for (const auto& [name, f] : files)
    out += fmt::format("{} {} {} {}\n", name, f.bytes, f.crc, f.tensors);
  return out;
}

void save_collectively(const std::string& dir, const Checkpoint& checkpoint,
                       const SaveOptions& options) {
  const int rank = options.rank, world = options.world_size;
  const Exchange exchange =
      options.exchange ? options.exchange : [](const std::string& s) { return std::vector{s}; };
  const std::string manifest_path = (fs::path(dir) / kCheckpointManifest).string();

  // Round 1: every rank has its state; rank 0 says the generation, and
  // every rank which per-rank sections it has (they must agree).
  std::vector<TensorDict> dicts;
  std::exception_ptr mine;
  uint64_t generation = 0;
  try {
    dicts = take_states(dir, checkpoint, rank);
    if (rank == 0) {
      create_directory(dir);
      generation = next_generation(manifest_path);
    }
  } catch (...) {
    mine = std::current_exception();
  }
  std::vector<std::string> replies =
      exchange(mine ? error_message(mine)
                    : ok_message(std::to_string(generation) + " " + per_rank_names(checkpoint)));
  agree(replies, mine, dir, "to take its state; nothing was written", world);
  const std::string names_here = per_rank_names(checkpoint);
  for (size_t r = 0; r < replies.size(); ++r) {
    const std::string& reply = replies[r];
    const size_t space = reply.find(' ');
    const std::string names = space == std::string::npos ? "" : reply.substr(space + 1);
    DDP_CHECK(names == names_here,
              "save_checkpoint '{}': rank {} has the per-rank sections [{}], rank {} has [{}]; "
              "every rank must add the same ones; nothing was written",
              dir, r, names, rank, names_here);
    if (r == 0) generation = std::stoull(reply.substr(1, space - 1));
  }

  // Round 2: every rank writes its files (rank 0 the shared ones too).
  Manifest m = manifest_head(checkpoint, options);
  m.format_version = 2;
  m.world_size = world;
  m.generation = generation;
  std::vector<std::string> written;
  std::vector<std::pair<std::string, detail::FileEntry>> mine_files;
  try {
    if (rank != 0) create_directory(dir);
    for (size_t i = 0; i < dicts.size(); ++i) {
      const Checkpoint::Section& s = checkpoint.sections()[i];
      if (s.per_rank()) {
        mine_files.emplace_back(
            s.name, write_section_file(dir, s.name, detail::per_rank_file_name(s.name, rank, generation),
                                       dicts[i], written));
      } else if (rank == 0) {
        SectionEntry e;
        e.name = s.name;
        static_cast<detail::FileEntry&>(e) = write_section_file(
            dir, s.name, detail::section_file_name(s.name, generation), dicts[i], written);
        m.sections.push_back(std::move(e));
      }
    }
  } catch (...) {
    mine = std::current_exception();
  }
  try {
    replies = exchange(mine ? error_message(mine) : ok_message(describe_files(mine_files)));
    agree(replies, mine, dir, "to write its files; nothing was committed", world);
  } catch (...) {
    remove_files(written);
    throw;
  }

  // Rank 0 checks every rank's files as it reads them, and commits.
  bool committed = false;
  if (rank == 0) {
    try {
      std::vector<SectionEntry> per_rank;
      for (const Checkpoint::Section& s : checkpoint.sections())
        if (s.per_rank()) {
          per_rank.emplace_back();
          per_rank.back().name = s.name;
        }
      for (int r = 0; r < world; ++r) {
        std::istringstream lines(replies[size_t(r)].substr(1));
        for (SectionEntry& e : per_rank) {
          std::string name;
          detail::FileEntry f;
          lines >> name >> f.bytes >> f.crc >> f.tensors;
          DDP_CHECK_T(Error, lines && name == e.name,
                      "save_checkpoint '{}': rank {} reported its files as '{}'", dir, r,
                      replies[size_t(r)].substr(1));
          f.file = detail::per_rank_file_name(e.name, r, generation);
          const std::string path = (fs::path(dir) / f.file).string();
          Digest d;
          try {
            d = digest_file(path);
          } catch (const Error& err) {
            DDP_THROW(IoError,
                      "save_checkpoint '{}': rank 0 cannot read '{}', which rank {} wrote ({}); "
                      "per-rank sections need a directory that every rank shares",
                      dir, path, r, err.what());
          }
          DDP_CHECK_T(IoError, d.bytes == f.bytes && d.crc == f.crc,
                      "save_checkpoint '{}': '{}' is {} bytes with CRC32 {} to rank 0, but rank "
                      "{} wrote {} bytes with CRC32 {}; per-rank sections need a directory that "
                      "every rank shares",
                      dir, path, d.bytes, hex32(d.crc), r, f.bytes, hex32(f.crc));
          e.ranks.push_back(f);
        }
      }
      // Per-rank sections keep their place among the shared ones.
      std::vector<SectionEntry> ordered;
      size_t shared = 0, own = 0;
      for (const Checkpoint::Section& s : checkpoint.sections())
        ordered.push_back(std::move(s.per_rank() ? per_rank[own++] : m.sections[shared++]));
      m.sections = std::move(ordered);
      fsync_path(dir, true);
      write_and_rename(manifest_path, detail::render_manifest(m));
      committed = true;
      finish_commit(dir, m);
    } catch (...) {
      mine = std::current_exception();
    }
  }
  // Round 3: whether rank 0 committed. A rank that cannot learn it keeps
  // its files: they are either in the checkpoint or removed by the next save.
  replies = exchange(mine ? error_message(mine) : ok_message());
  if (rank == 0 ? !committed : !replies.empty() && !replies[0].empty() && replies[0][0] != '+')
    remove_files(written);
  agree(replies, mine, dir, "to commit the checkpoint", world);
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
  sections_.push_back({name, std::move(save), std::move(load), {}, {}});
  return *this;
}

Checkpoint& Checkpoint::add_per_rank(const std::string& name, SaveFn save, LoadPerRankFn load,
                                     LoadFn restore, SaveFn peer_save) {
  check_name(name, "section", false);
  DDP_CHECK(save && load && restore,
            "Checkpoint: per-rank section '{}' needs a save, a load and a restore function", name);
  sections_.push_back(
      {name, std::move(save), std::move(restore), std::move(load), std::move(peer_save)});
  return *this;
}

bool Checkpoint::has_per_rank_sections() const {
  return std::any_of(sections_.begin(), sections_.end(),
                     [](const Section& s) { return s.per_rank(); });
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
  const bool per_rank = checkpoint.has_per_rank_sections();
  if (options.rank != 0 && !per_rank) return;  // See Note [Checkpoints under DDP].
  DDP_CHECK(options.epoch >= 0 && options.step >= 0,
            "save_checkpoint: epoch and step must be >= 0, got epoch {} and step {}", options.epoch,
            options.step);
  DDP_CHECK(!dir.empty(), "save_checkpoint: the directory name is empty");
  if (!per_rank) return save_alone(dir, checkpoint, options);
  DDP_CHECK(options.world_size >= 1 && options.rank < options.world_size,
            "save_checkpoint: rank {} is not in a world of size {}", options.rank,
            options.world_size);
  DDP_CHECK(options.world_size == 1 || options.exchange,
            "save_checkpoint '{}': the checkpoint has per-rank sections ({}) and world_size is {}, "
            "so every rank saves and the ranks need an exchange (SaveOptions::exchange; "
            "parallel::checkpoint_save_options(group) sets it)",
            dir, per_rank_names(checkpoint), options.world_size);
  save_collectively(dir, checkpoint, options);
}

// ---- load -------------------------------------------------------------------------------

CheckpointInfo read_checkpoint_info(const std::string& dir) {
  return info_of(detail::read_manifest((fs::path(dir) / kCheckpointManifest).string()));
}

CheckpointInfo load_checkpoint(const std::string& dir, Checkpoint& checkpoint,
                               const LoadOptions& options) {
  DDP_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
            "load_checkpoint: rank {} is not in a world of size {}", options.rank,
            options.world_size);
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
    if (found)
      DDP_CHECK(found->per_rank() == s.per_rank(),
                "load_checkpoint: section '{}' of '{}' was saved {}, but the Checkpoint adds it "
                "{} (Note [Per-rank checkpoint sections])",
                s.name, manifest_path, found->per_rank() ? "per rank" : "once, by rank 0",
                s.per_rank() ? "per rank (add_per_rank)" : "as a shared section (add)");
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

  // Every file: size, checksum, and a valid safetensors file; a per-rank
  // section's files are checked for their size here and read (and checked
  // whole) when the section asks for them.
  for (Match& mt : matches) {
    const SectionEntry& e = *mt.entry;
    if (!e.per_rank()) {
      mt.tensors = read_section_file(dir, e.name, e);
      continue;
    }
    for (const detail::FileEntry& f : e.ranks) {
      const std::string path = (fs::path(dir) / f.file).string();
      const uint64_t bytes = detail::ReadFile(path).size();
      DDP_CHECK_T(IoError, bytes == f.bytes,
                  "load_checkpoint: '{}' (section '{}') is {} bytes, the manifest records {}{}",
                  path, e.name, bytes, f.bytes, bytes < f.bytes ? " (truncated)" : "");
    }
  }
  auto load_section = [&](const Match& mt) {
    if (!mt.section->per_rank()) return mt.section->load(mt.tensors);
    const SectionEntry& e = *mt.entry;
    Checkpoint::RankFiles files;
    files.saved_world_size = int(e.ranks.size());
    files.rank = options.rank;
    files.world_size = options.world_size;
    files.read = [&dir, &e](int saved_rank) {
      DDP_CHECK(saved_rank >= 0 && size_t(saved_rank) < e.ranks.size(),
                "load_checkpoint: section '{}' was saved by {} ranks; there is no rank {}", e.name,
                e.ranks.size(), saved_rank);
      return read_section_file(dir, e.name, e.ranks[size_t(saved_rank)]);
    };
    mt.section->load_per_rank(files);
  };

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
      load_section(matches[i]);
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
    const std::string where =
        e.per_rank() ? fmt::format("'{}' (its per-rank files)", dir)
                     : fmt::format("'{}'", (fs::path(dir) / e.file).string());
    rethrow_with_context(ep, fmt::format("load_checkpoint: section '{}' of {} does not fit; "
                                         "nothing was loaded",
                                         e.name, where));
  }
  for (const auto& [gen, entry] : gens) gen->set_state(entry->seed, entry->offset);
  return info;
}

}  // namespace ddp::io
