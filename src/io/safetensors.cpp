// Reading and writing safetensors files (safetensors.h).

#include "ddp/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/io/json.h"
#include "io/file.h"

namespace ddp::io {

// Tensor bytes are copied between memory and file as they are; the format
// is little-endian, and ddp's bool is one byte holding 0 or 1.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");
static_assert(sizeof(bool) == 1, "safetensors BOOL is one byte");

namespace {

struct DTypeEntry {
  const char* name;
  DType dtype;
};
constexpr DTypeEntry kDTypes[] = {{"F32", DType::f32},   {"F64", DType::f64},   {"F16", DType::f16},
                                  {"BF16", DType::bf16}, {"I32", DType::i32},   {"I64", DType::i64},
                                  {"U8", DType::u8},     {"BOOL", DType::bool_}};
// Valid in the format but without a ddp dtype: refused as "unsupported"
// rather than "unknown", so the message says the file is fine but ddp is not.
constexpr const char* kUnsupportedDTypes[] = {"I8",      "I16",     "U16",     "U32",
                                              "U64",     "F8_E4M3", "F8_E5M2", "F8_E8M0",
                                              "F6_E2M3", "F6_E3M2", "F4",      "C64"};

// The reference implementation's limit: a header is metadata, and a larger
// one is a broken or hostile file, not a model.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr size_t kMaxRank = 64;
constexpr const char* kMetadataKey = "__metadata__";

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// "json: at byte 3: ... (json.cpp:42)" -> without the location, which the
// IoError raised here adds again.
std::string strip_location(std::string msg) {
  size_t open = msg.rfind(" (");
  if (open != std::string::npos && !msg.empty() && msg.back() == ')') msg.resize(open);
  return msg;
}

// A header's shape array as written, for messages ("[2, -1]", "[2, \"x\"]").
std::string shape_text(const json::Value& shape) {
  std::vector<std::string> parts;
  for (const json::Value& d : shape.as_array())
    parts.push_back(d.is_number()   ? d.number_literal()
                    : d.is_string() ? json::quote(d.as_string())
                                    : json::kind_name(d.kind()));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

class Loader {
 public:
  explicit Loader(const std::string& path) : path_(path) {}

  TensorDict load(Metadata* metadata);

 private:
  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    DDP_THROW(IoError, "load_safetensors: '{}': {}", path_,
              fmt::format(f, std::forward<Args>(args)...));
  }
  json::Value read_header(const detail::ReadFile& file);
  Entry parse_entry(const std::string& name, const json::Value& v) const;
  uint64_t offset_field(const std::string& name, const json::Value& v, size_t i) const;
  void check_layout(const std::vector<Entry>& entries) const;

  std::string path_;
  uint64_t header_bytes_ = 0;
  uint64_t data_bytes_ = 0;
};

json::Value Loader::read_header(const detail::ReadFile& file) {
  if (file.size() < 8)
    fail("the file is {} bytes, too short for the 8-byte header length (truncated?)", file.size());
  unsigned char len[8];
  file.read_at(0, len, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  // Checked before anything is allocated: the length is untrusted.
  if (n > file.size() - 8)
    fail(
        "the header length {} exceeds the {} bytes that follow it (truncated, or not a "
        "safetensors file?)",
        n, file.size() - 8);
  if (n > kMaxHeaderBytes)
    fail("the header length {} exceeds the limit of {} bytes", n, kMaxHeaderBytes);
  if (n < 2) fail("the header length {} is too small for a JSON object", n);
  header_bytes_ = n;
  data_bytes_ = file.size() - 8 - n;
  std::string text(n, '\0');
  file.read_at(8, text.data(), n);
  json::Value root;
  try {
    root = json::parse(text);
  } catch (const ValueError& e) {
    fail("the header is not valid JSON: {}", strip_location(e.what()));
  }
  if (!root.is_object()) fail("the header is {}, not a JSON object", json::kind_name(root.kind()));
  return root;
}

uint64_t Loader::offset_field(const std::string& name, const json::Value& v, size_t i) const {
  std::optional<uint64_t> u = v.as_uint64();
  if (!u) fail("tensor '{}': data_offsets[{}] is not a non-negative integer", name, i);
  return *u;
}

Entry Loader::parse_entry(const std::string& name, const json::Value& v) const {
  if (!v.is_object())
    fail("tensor '{}': the entry is {}, not an object", name, json::kind_name(v.kind()));
  Entry e;
  e.name = name;
  const json::Value* dtype = v.find("dtype");
  if (!dtype || !dtype->is_string()) fail("tensor '{}': missing or non-string \"dtype\"", name);
  const std::string& dn = dtype->as_string();
  auto known = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                            [&](const DTypeEntry& d) { return dn == d.name; });
  if (known == std::end(kDTypes)) {
    bool valid = std::any_of(std::begin(kUnsupportedDTypes), std::end(kUnsupportedDTypes),
                             [&](const char* u) { return dn == u; });
    if (valid)
      fail(
          "tensor '{}': dtype {} is not supported by ddp (supported: F32, F64, F16, "
          "BF16, I32, I64, U8, BOOL)",
          name, dn);
    fail("tensor '{}': unknown dtype \"{}\"", name, dn);
  }
  e.dtype = known->dtype;

  const json::Value* shape = v.find("shape");
  if (!shape || !shape->is_array()) fail("tensor '{}': missing or non-array \"shape\"", name);
  if (shape->as_array().size() > kMaxRank)
    fail("tensor '{}': shape has {} dims, more than {}", name, shape->as_array().size(), kMaxRank);
  // Elements are counted without overflow. The product of the non-zero
  // dims is bounded as well, even when a zero dim makes the tensor empty,
  // because the tensor's strides are that product.
  const uint64_t limit = uint64_t(std::numeric_limits<int64_t>::max()) / element_size(e.dtype);
  uint64_t product = 1;
  bool empty = false;
  for (const json::Value& d : shape->as_array()) {
    std::optional<uint64_t> u = d.as_uint64();
    if (!u)
      fail("tensor '{}': shape {} has an entry that is not a non-negative integer", name,
           shape_text(*shape));
    if (*u == 0) {
      empty = true;
      e.shape.push_back(0);
      continue;
    }
    if (*u > limit || product > limit / *u)
      fail("tensor '{}': shape {} has too many elements", name, shape_text(*shape));
    product *= *u;
    e.shape.push_back(int64_t(*u));
  }
  uint64_t nbytes = empty ? 0 : product * element_size(e.dtype);

  const json::Value* offsets = v.find("data_offsets");
  if (!offsets || !offsets->is_array() || offsets->as_array().size() != 2)
    fail("tensor '{}': \"data_offsets\" must be an array [begin, end]", name);
  e.begin = offset_field(name, offsets->as_array()[0], 0);
  e.end = offset_field(name, offsets->as_array()[1], 1);
  if (e.begin > e.end)
    fail("tensor '{}': data_offsets [{}, {}] end before they begin", name, e.begin, e.end);
  if (e.end > data_bytes_)
    fail(
        "tensor '{}': data_offsets [{}, {}] run past the end of the data, which is {} bytes "
        "(truncated file?)",
        name, e.begin, e.end, data_bytes_);
  if (e.end - e.begin != nbytes)
    fail("tensor '{}': shape {} of {} needs {} bytes, but data_offsets [{}, {}] span {}", name,
         shape_str(e.shape), dn, nbytes, e.begin, e.end, e.end - e.begin);
  return e;
}

// Note [Validating safetensors files]
// Like the reference implementation, the tensors must tile the data part
// exactly: sorted by offset, each begins where the previous one ended, and
// the last ends at the end of the file. That rules out overlapping tensors
// (one write would change another), holes and trailing bytes (room for
// content the header does not describe). Empty tensors occupy no bytes and
// may sit anywhere in range. Every length and offset is checked against the
// file size before any allocation, so a corrupt header cannot make the
// loader allocate more than the file holds.
void Loader::check_layout(const std::vector<Entry>& entries) const {
  std::vector<const Entry*> sorted;
  for (const Entry& e : entries)
    if (e.end > e.begin) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : sorted) {
    if (e->begin < expected)
      fail("tensor '{}': data_offsets [{}, {}] overlap those of tensor '{}' [{}, {}]", e->name,
           e->begin, e->end, prev->name, prev->begin, prev->end);
    if (e->begin > expected)
      fail("tensor '{}': data_offsets [{}, {}] leave bytes [{}, {}) that no tensor covers", e->name,
           e->begin, e->end, expected, e->begin);
    expected = e->end;
    prev = e;
  }
  if (expected != data_bytes_)
    fail("the data part is {} bytes but the tensors cover only {} (trailing bytes)", data_bytes_,
         expected);
}

TensorDict Loader::load(Metadata* metadata) {
  detail::ReadFile file(path_);
  json::Value root = read_header(file);
  std::vector<Entry> entries;
  const auto& keys = root.keys();
  const auto& values = root.values();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] != kMetadataKey) {
      entries.push_back(parse_entry(keys[i], values[i]));
      continue;
    }
    const json::Value& m = values[i];
    if (!m.is_object()) fail("\"__metadata__\" is {}, not an object", json::kind_name(m.kind()));
    for (size_t j = 0; j < m.keys().size(); ++j) {
      const json::Value& mv = m.values()[j];
      if (!mv.is_string())
        fail("\"__metadata__\" maps strings to strings, but \"{}\" is {}", m.keys()[j],
             json::kind_name(mv.kind()));
      if (metadata) (*metadata)[m.keys()[j]] = mv.as_string();
    }
  }
  check_layout(entries);

  TensorDict out;
  const uint64_t data_start = 8 + header_bytes_;
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    size_t n = size_t(e.end - e.begin);
    if (n > 0) file.read_at(data_start + e.begin, t.data_ptr(), n);
    // Bytes other than 0 and 1 are not valid bools in C++; normalise them
    // the way a cast to bool would.
    if (e.dtype == DType::bool_) {
      auto* p = static_cast<unsigned char*>(t.data_ptr());
      for (size_t k = 0; k < n; ++k) p[k] = p[k] != 0;
    }
    out.insert(e.name, t);
  }
  return out;
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const DTypeEntry& d : kDTypes)
    if (d.dtype == dtype) return d.name;
  DDP_THROW(DTypeError, "safetensors: no name for dtype {}", dtype_name(dtype));
}

TensorDict load_safetensors(const std::string& path, Metadata* metadata) {
  if (metadata) metadata->clear();
  return Loader(path).load(metadata);
}

void save_safetensors(const std::string& path, const TensorDict& tensors,
                      const Metadata& metadata) {
  // The header first: it needs only names, shapes and dtypes.
  json::Object root;
  if (!metadata.empty()) {
    json::Object meta;
    for (const auto& [k, v] : metadata) meta.add(k, v);
    root.add(kMetadataKey, meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    DDP_CHECK(t.defined(), "save_safetensors: '{}': tensor '{}' is undefined", path, name);
    DDP_CHECK(name != kMetadataKey, "save_safetensors: '{}': \"{}\" is reserved for metadata", path,
              name);
    const uint64_t n = t.nbytes();
    json::Array shape, offsets;
    for (int64_t d : t.shape()) shape.push(d);
    offsets.push(offset).push(offset + n);
    root.add(name, json::Object()
                       .add("dtype", safetensors_dtype_name(t.dtype()))
                       .add("shape", shape)
                       .add("data_offsets", offsets));
    offset += n;
  }
  // Names and metadata are caller strings: one that is not valid UTF-8
  // cannot be written (load_safetensors would refuse the file).
  std::string header;
  try {
    header = root.str();
  } catch (const ValueError& e) {
    DDP_THROW(ValueError,
              "save_safetensors: '{}': a tensor name or metadata string cannot be "
              "stored: {}",
              path, strip_location(e.what()));
  }
  // Padded with spaces so the data starts 8-byte aligned, as the reference
  // writer does (readers that map the file can then use it in place).
  header.append((8 - header.size() % 8) % 8, ' ');

  detail::AtomicWriteFile file(path);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));
  file.write(len, 8);
  file.write(header.data(), header.size());
  for (const auto& [name, t] : tensors) {
    if (t.numel() == 0) continue;
    // One tensor at a time on the host, so a model on a GPU is never
    // copied to host memory all at once.
    Tensor host;
    {
      NoGradGuard no_grad;
      host = t.detach().to(Device::cpu()).contiguous();
    }
    file.write(host.data_ptr(), host.nbytes());
  }
  file.commit();
}

void save_state_dict(const std::string& path, const nn::Module& module, const Metadata& metadata) {
  save_safetensors(path, module.state_dict(), metadata);
}

nn::LoadResult load_state_dict(const std::string& path, nn::Module& module, bool strict) {
  return module.load_state_dict(load_safetensors(path), strict);
}

}  // namespace ddp::io
