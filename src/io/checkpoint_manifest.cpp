// The checkpoint manifest (checkpoint_manifest.h).

#include "io/checkpoint_manifest.h"

#include <cctype>
#include <limits>
#include <optional>

#include "ddp/core/error.h"
#include "ddp/io/json.h"
#include "io/crc32.h"
#include "io/file.h"

namespace ddp::io::detail {

namespace {

constexpr const char* kFormatName = "ddp.checkpoint";
constexpr const char* kCrcKey = "manifest_crc32";
constexpr const char* kCrcPlaceholder = "00000000";

bool parse_hex32(const std::string& s, uint32_t* out) {
  if (s.size() != 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = (v << 4) | uint32_t(d);
  }
  *out = v;
  return true;
}

std::string read_text(const std::string& path) {
  detail::ReadFile f(path);
  DDP_CHECK_T(IoError, f.size() <= 64u << 20, "'{}' is {} bytes, too large for a manifest", path,
              f.size());
  std::string text(size_t(f.size()), '\0');
  if (!text.empty()) f.read_at(0, text.data(), text.size());
  return text;
}

std::string render_file(const FileEntry& e) {
  return fmt::format("{{\"file\": {}, \"bytes\": {}, \"crc32\": \"{}\", \"tensors\": {}}}",
                     json::quote(e.file), e.bytes, hex32(e.crc), e.tensors);
}

std::string render(const Manifest& m, const std::string& crc) {
  using json::quote;
  std::string s = "{\n";
  s += fmt::format("  \"format\": {},\n  \"format_version\": {},\n", quote(kFormatName),
                   m.format_version);
  if (m.format_version >= 2) s += fmt::format("  \"world_size\": {},\n", m.world_size);
  s += fmt::format("  \"generation\": {},\n  \"epoch\": {},\n  \"step\": {},\n", m.generation,
                   m.epoch, m.step);
  s += "  \"generators\": {";
  for (size_t i = 0; i < m.generators.size(); ++i)
    s += fmt::format("{}\n    {}: {{\"seed\": {}, \"offset\": {}}}", i ? "," : "",
                     quote(m.generators[i].name), m.generators[i].seed, m.generators[i].offset);
  s += m.generators.empty() ? "},\n" : "\n  },\n";
  s += "  \"metadata\": {";
  size_t i = 0;
  for (const auto& [k, v] : m.metadata)
    s += fmt::format("{}\n    {}: {}", i++ ? "," : "", quote(k), quote(v));
  s += m.metadata.empty() ? "},\n" : "\n  },\n";
  s += "  \"sections\": {";
  for (size_t j = 0; j < m.sections.size(); ++j) {
    const SectionEntry& e = m.sections[j];
    s += fmt::format("{}\n    {}: ", j ? "," : "", quote(e.name));
    if (!e.per_rank()) {
      s += render_file(e);
      continue;
    }
    s += "{\"ranks\": [";
    for (size_t r = 0; r < e.ranks.size(); ++r)
      s += fmt::format("{}\n      {}", r ? "," : "", render_file(e.ranks[r]));
    s += "\n    ]}";
  }
  s += m.sections.empty() ? "},\n" : "\n  },\n";
  s += fmt::format("  \"{}\": \"{}\"\n}}\n", kCrcKey, crc);
  return s;
}

// Field readers that name the manifest and the key in every error.
class ManifestReader {
 public:
  explicit ManifestReader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const {
    DDP_THROW(IoError, "checkpoint manifest '{}': {}", path_, what);
  }
  const json::Value& member(const json::Value& obj, const char* key, json::Value::Kind kind,
                            const std::string& where) const {
    const json::Value* v = obj.find(key);
    if (!v) fail(fmt::format("missing '{}'{}", key, where));
    if (v->kind() != kind)
      fail(fmt::format("'{}'{} must be a {}, got a {}", key, where, json::kind_name(kind),
                       json::kind_name(v->kind())));
    return *v;
  }
  uint64_t u64(const json::Value& obj, const char* key, const std::string& where = "",
               uint64_t max = std::numeric_limits<uint64_t>::max()) const {
    const json::Value& v = member(obj, key, json::Value::Kind::number, where);
    std::optional<uint64_t> n = v.as_uint64();
    if (!n || *n > max)
      fail(fmt::format("'{}'{} must be a whole number in [0, {}], got {}", key, where, max,
                       v.number_literal()));
    return *n;
  }
  const std::string& str(const json::Value& obj, const char* key,
                         const std::string& where = "") const {
    return member(obj, key, json::Value::Kind::string, where).as_string();
  }

 private:
  std::string path_;
};

}  // namespace

std::string hex32(uint32_t v) { return fmt::format("{:08x}", v); }

std::string section_file_name(const std::string& section, uint64_t generation) {
  return fmt::format("{}.g{}.safetensors", section, generation);
}

std::string per_rank_file_name(const std::string& section, int rank, uint64_t generation) {
  return fmt::format("{}.r{}.g{}.safetensors", section, rank, generation);
}

bool valid_checkpoint_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

// The manifest text, with its own CRC32 computed over the text that has
// the placeholder in the checksum's place.
std::string render_manifest(const Manifest& m) {
  std::string draft = render(m, kCrcPlaceholder);
  return render(m, hex32(detail::crc32(0, draft.data(), draft.size())));
}

Manifest read_manifest(const std::string& path) {
  std::string text = read_text(path);
  ManifestReader r(path);
  json::Value root;
  try {
    root = json::parse(text);
  } catch (const ValueError& e) {
    r.fail(fmt::format("not valid JSON (truncated or corrupt?): {}", e.what()));
  }
  if (!root.is_object()) r.fail("not a JSON object");
  const json::Value* format = root.find("format");
  if (!format || !format->is_string() || format->as_string() != kFormatName)
    r.fail(fmt::format("not a ddp checkpoint ('format' must be \"{}\")", kFormatName));
  uint64_t version = r.u64(root, "format_version");
  if (version < 1 || version > uint64_t(kCheckpointFormatVersion))
    r.fail(fmt::format("format_version {} is not supported (this build reads versions 1 to {})",
                       version, kCheckpointFormatVersion));

  // The manifest's own checksum: the text with the placeholder in its place.
  const std::string& stored = r.str(root, kCrcKey);
  uint32_t want = 0;
  if (!parse_hex32(stored, &want)) r.fail(fmt::format("'{}' is not 8 hex digits", kCrcKey));
  const std::string field = fmt::format("\"{}\": \"{}\"", kCrcKey, stored);
  size_t at = text.rfind(field);
  if (at == std::string::npos) r.fail(fmt::format("'{}' is not written as expected", kCrcKey));
  std::string draft = text;
  draft.replace(at, field.size(), fmt::format("\"{}\": \"{}\"", kCrcKey, kCrcPlaceholder));
  uint32_t got = detail::crc32(0, draft.data(), draft.size());
  if (got != want)
    r.fail(
        fmt::format("checksum mismatch: the text has CRC32 {}, the manifest records {} "
                    "(the file is corrupt)",
                    hex32(got), stored));

  Manifest m;
  m.format_version = int(version);
  constexpr uint64_t kMaxI64 = uint64_t(std::numeric_limits<int64_t>::max());
  constexpr uint64_t kMaxWorld = 1u << 20;
  if (m.format_version >= 2) m.world_size = int(r.u64(root, "world_size", "", kMaxWorld));
  if (m.format_version >= 2 && m.world_size < 1) r.fail("'world_size' must be at least 1");
  m.generation = r.u64(root, "generation");
  m.epoch = int64_t(r.u64(root, "epoch", "", kMaxI64));
  m.step = int64_t(r.u64(root, "step", "", kMaxI64));
  const json::Value& gens = r.member(root, "generators", json::Value::Kind::object, "");
  for (size_t i = 0; i < gens.keys().size(); ++i) {
    std::string where = fmt::format(" of generator '{}'", gens.keys()[i]);
    const json::Value& g = gens.values()[i];
    if (!g.is_object()) r.fail("generator '" + gens.keys()[i] + "' must be an object");
    m.generators.push_back({gens.keys()[i], r.u64(g, "seed", where), r.u64(g, "offset", where)});
  }
  const json::Value& meta = r.member(root, "metadata", json::Value::Kind::object, "");
  for (size_t i = 0; i < meta.keys().size(); ++i) {
    if (!meta.values()[i].is_string())
      r.fail(fmt::format("metadata '{}' must be a string", meta.keys()[i]));
    m.metadata[meta.keys()[i]] = meta.values()[i].as_string();
  }
  const json::Value& secs = r.member(root, "sections", json::Value::Kind::object, "");
  for (size_t i = 0; i < secs.keys().size(); ++i) {
    SectionEntry e;
    e.name = secs.keys()[i];
    std::string where = fmt::format(" of section '{}'", e.name);
    const json::Value& s = secs.values()[i];
    if (!s.is_object()) r.fail("section '" + e.name + "' must be an object");
    if (!valid_checkpoint_name(e.name)) r.fail(fmt::format("bad section name '{}'", e.name));
    // Only the names save_checkpoint gives: no paths out of the directory.
    auto read_file = [&](const json::Value& v, const std::string& expected,
                         const std::string& at) {
      FileEntry f;
      f.file = r.str(v, "file", at);
      if (f.file != expected)
        r.fail(fmt::format("'file'{} is '{}', expected '{}'", at, f.file, expected));
      f.bytes = r.u64(v, "bytes", at);
      if (!parse_hex32(r.str(v, "crc32", at), &f.crc))
        r.fail(fmt::format("'crc32'{} is not 8 hex digits", at));
      f.tensors = r.u64(v, "tensors", at);
      return f;
    };
    if (s.find("ranks") == nullptr) {
      static_cast<FileEntry&>(e) = read_file(s, section_file_name(e.name, m.generation), where);
    } else {
      if (m.format_version < 2)
        r.fail(fmt::format("per-rank section '{}' in a format_version 1 manifest", e.name));
      const json::Value& ranks = r.member(s, "ranks", json::Value::Kind::array, where);
      const std::vector<json::Value>& items = ranks.as_array();
      if (items.size() != size_t(m.world_size))
        r.fail(fmt::format("section '{}' has {} per-rank files for a world_size of {}", e.name,
                           items.size(), m.world_size));
      for (size_t k = 0; k < items.size(); ++k) {
        const json::Value& v = items[k];
        std::string at = fmt::format(" of rank {} of section '{}'", k, e.name);
        if (!v.is_object()) r.fail("the entry" + at + " must be an object");
        e.ranks.push_back(read_file(v, per_rank_file_name(e.name, int(k), m.generation), at));
      }
    }
    m.sections.push_back(std::move(e));
  }
  return m;
}

}  // namespace ddp::io::detail
