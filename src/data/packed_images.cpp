// Packed image shards (packed_images.h). See Note [Packed image format].

#include "ddp/data/packed_images.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

#include "data/data_util.h"
#include "data/image_codec.h"
#include "data/image_resample.h"
#include "ddp/core/logging.h"

namespace ddp::data {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'I', 'M', 'G', '1', '\n'};
constexpr char kEndMagic[8] = {'D', 'D', 'P', 'E', 'N', 'D', '1', '\n'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 64, kEntryBytes = 32, kTrailerBytes = 12;

uint32_t crc32_of(const void* p, size_t n) {
  return uint32_t(::crc32(0L, static_cast<const Bytef*>(p), uInt(n)));
}

template <class T> void write_le(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);  // little-endian hosts only (x86-64, aarch64)
}
template <class T> T read_le(const std::byte* p, size_t at) {
  T v;
  std::memcpy(&v, p + at, sizeof v);
  return v;
}

std::string shard_name(int64_t s) { return fmt::format("shard-{:05d}.ddpimg", s); }

struct Packed {
  std::vector<uint8_t> jpeg;
  int width = 0, height = 0;
  std::string error;  // non-empty: a bad image
};

// Decode, shrink so the longer side is at most max_side (PIL's filter, Note
// [PIL's resampling]), re-encode.
Packed repack(const std::string& path, const PackOptions& o) {
  Packed p;
  try {
    const std::vector<uint8_t> bytes = detail::read_file(path);
    const detail::ImageSize s = detail::read_image_size(bytes, path);
    const detail::DecodedRegion full =
        detail::decode_rgb(bytes, path, 1, {0, 0, s.width, s.height});
    const int longest = std::max(s.width, s.height);
    int w = s.width, h = s.height;
    if (longest > o.max_side) {
      const double f = double(o.max_side) / longest;
      w = std::max(1, int(std::lround(s.width * f)));
      h = std::max(1, int(std::lround(s.height * f)));
    }
    std::vector<uint8_t> rgb;
    const uint8_t* src = full.rgb.data();
    if (w != s.width || h != s.height) {
      rgb.resize(size_t(w) * size_t(h) * 3);
      detail::resample_rgb(full, 0, 0, detail::bilinear_axis(s.width, 0, s.width, w, 0, w),
                           detail::bilinear_axis(s.height, 0, s.height, h, 0, h), rgb.data());
      src = rgb.data();
    }
    p.jpeg = detail::encode_jpeg(src, w, h, int(o.quality));
    p.width = w;
    p.height = h;
  } catch (const IoError& e) {
    p.error = e.what();
  }
  return p;
}

}  // namespace

PackReport pack_image_folder(const std::string& input, const std::string& output,
                             const PackOptions& o) {
  DDP_CHECK(o.shards >= 1, "pack_image_folder: shards {} < 1", o.shards);
  DDP_CHECK(o.max_side >= 1 && o.max_side <= 65535, "pack_image_folder: max_side {} is not in [1, 65535]",
            o.max_side);
  DDP_CHECK(o.quality >= 1 && o.quality <= 100, "pack_image_folder: quality {} is not in [1, 100]",
            o.quality);
  DDP_CHECK(o.threads >= 1, "pack_image_folder: threads {} < 1", o.threads);
  const ImageFolderDataset folder(input, ImageTransform::imagenet_eval());
  const auto& samples = folder.samples();
  const auto n = int64_t(samples.size());
  // A seeded shuffle (Fisher-Yates on the loader's mixing function), so that
  // each shard holds every class.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t r = detail::mix_key(o.seed, uint64_t(i));
    std::swap(order[size_t(i)], order[detail::below(r, uint64_t(i) + 1)]);
  }
  std::error_code ec;
  fs::create_directories(output, ec);
  if (ec) DDP_THROW(IoError, "cannot create '{}': {}", output, ec.message());
  PackReport report;
  {
    std::ofstream cls(fs::path(output) / "classes.txt", std::ios::trunc);
    for (const std::string& c : folder.classes()) cls << c << '\n';
    if (!cls.good()) DDP_THROW(IoError, "cannot write '{}/classes.txt'", output);
  }
  for (int64_t s = 0; s < o.shards; ++s) {
    const int64_t lo = n * s / o.shards, hi = n * (s + 1) / o.shards;
    std::vector<Packed> packed(size_t(hi - lo));
    std::vector<std::thread> pool;
    std::atomic<int64_t> next{lo};
    for (int t = 0; t < o.threads; ++t)
      pool.emplace_back([&] {
        for (int64_t i; (i = next.fetch_add(1)) < hi;)
          packed[size_t(i - lo)] = repack(samples[size_t(order[size_t(i)])].path, o);
      });
    for (std::thread& t : pool) t.join();

    std::vector<uint8_t> file(kHeaderBytes, 0), table;
    int64_t count = 0;
    for (int64_t i = lo; i < hi; ++i) {
      Packed& p = packed[size_t(i - lo)];
      const int64_t original = order[size_t(i)];
      if (!p.error.empty()) {
        if (o.bad_images == BadImagePolicy::raise) DDP_THROW(IoError, "{}", p.error);
        DDP_LOG_WARNING("pack_images: skipping a bad image: {}", p.error);
        report.skipped_images.push_back(p.error);
        ++report.skipped;
        continue;
      }
      report.bytes_in += int64_t(fs::file_size(samples[size_t(original)].path, ec));
      const size_t offset = file.size();
      file.insert(file.end(), p.jpeg.begin(), p.jpeg.end());
      file.resize((file.size() + 7) / 8 * 8, 0);
      std::vector<uint8_t> e(kEntryBytes, 0);
      write_le<uint64_t>(e, 0, offset);
      write_le<uint32_t>(e, 8, uint32_t(p.jpeg.size()));
      write_le<uint32_t>(e, 12, crc32_of(p.jpeg.data(), p.jpeg.size()));
      write_le<int64_t>(e, 16, original);
      write_le<int32_t>(e, 24, int32_t(samples[size_t(original)].label));
      write_le<uint16_t>(e, 28, uint16_t(p.width));
      write_le<uint16_t>(e, 30, uint16_t(p.height));
      table.insert(table.end(), e.begin(), e.end());
      ++count;
    }
    const uint64_t table_offset = file.size();
    file.insert(file.end(), table.begin(), table.end());
    const uint32_t table_crc = crc32_of(table.data(), table.size());
    file.resize(file.size() + kTrailerBytes);
    write_le<uint32_t>(file, table_offset + table.size(), table_crc);
    std::memcpy(file.data() + table_offset + table.size() + 4, kEndMagic, 8);
    std::memcpy(file.data(), kMagic, 8);
    write_le<uint32_t>(file, 8, kVersion);
    write_le<uint32_t>(file, 12, uint32_t(s));
    write_le<uint32_t>(file, 16, uint32_t(o.shards));
    write_le<uint32_t>(file, 20, uint32_t(folder.num_classes()));
    write_le<uint64_t>(file, 24, uint64_t(count));
    write_le<uint64_t>(file, 32, table_offset);
    write_le<uint32_t>(file, 40, uint32_t(o.max_side));
    write_le<uint32_t>(file, 44, uint32_t(o.quality));
    write_le<uint32_t>(file, 60, crc32_of(file.data(), 60));
    const std::string path = (fs::path(output) / shard_name(s)).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));
    if (!out.good()) DDP_THROW(IoError, "cannot write '{}'", path);
    report.images += count;
    report.bytes_out += int64_t(file.size());
    report.shard_paths.push_back(path);
  }
  return report;
}

// ---- PackedImageDataset ----------------------------------------------------------

namespace {

std::vector<std::string> read_classes(const std::string& folder) {
  const fs::path p = fs::path(folder) / "classes.txt";
  std::ifstream f(p);
  if (!f) DDP_THROW(IoError, "'{}' is missing: '{}' is not a packed image folder", p.string(), folder);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  if (out.empty()) DDP_THROW(IoError, "'{}' lists no class", p.string());
  return out;
}

}  // namespace

PackedImageDataset::PackedImageDataset(const std::string& folder, ImageTransform transform,
                                       PackedOptions options)
    : EncodedImageDataset(transform, options.bad_images, read_classes(folder)), folder_(folder) {
  DDP_CHECK(options.num_parts >= 1 && options.part >= 0 && options.part < options.num_parts,
            "PackedImageDataset('{}'): part {} of {} does not exist", folder, options.part,
            options.num_parts);
  std::vector<std::string> paths;
  for (int64_t s = 0;; ++s) {
    const fs::path p = fs::path(folder) / shard_name(s);
    std::error_code ec;
    if (!fs::exists(p, ec)) break;
    paths.push_back(p.string());
  }
  if (paths.empty())
    DDP_THROW(IoError, "'{}' holds no {} file", folder, shard_name(0));
  for (size_t s = 0; s < paths.size(); ++s) {
    if (int64_t(s) % options.num_parts != options.part) continue;
    RecordFile file(paths[s], 1);
    const std::string& path = paths[s];
    const std::span<const std::byte> b = file.bytes();
    const std::byte* p = b.data();
    if (b.size() < kHeaderBytes + kTrailerBytes)
      DDP_THROW(IoError, "'{}' is truncated: {} bytes, less than a header and end marker", path,
                b.size());
    if (std::memcmp(p, kMagic, 8) != 0)
      DDP_THROW(IoError, "'{}' is not a packed image shard (wrong magic at byte 0)", path);
    if (read_le<uint32_t>(p, 60) != crc32_of(p, 60))
      DDP_THROW(IoError, "'{}': header checksum mismatch (bytes 0..59)", path);
    if (read_le<uint32_t>(p, 8) != kVersion)
      DDP_THROW(IoError, "'{}': format version {} (this libddp reads {})", path,
                read_le<uint32_t>(p, 8), kVersion);
    if (read_le<uint32_t>(p, 20) != uint32_t(num_classes()))
      DDP_THROW(IoError, "'{}' has {} classes, classes.txt {}", path, read_le<uint32_t>(p, 20),
                num_classes());
    const uint64_t count = read_le<uint64_t>(p, 24), table = read_le<uint64_t>(p, 32);
    const uint64_t table_end = table + count * kEntryBytes;
    // Each bound before the next, so that no sum of the file's fields wraps around.
    if (table < kHeaderBytes || table > b.size() || count > (b.size() - table) / kEntryBytes ||
        table_end + kTrailerBytes != b.size())
      DDP_THROW(IoError,
                "'{}' is truncated or corrupt: {} records with the index table at byte {} need "
                "{} bytes, the file has {}",
                path, count, table, table_end + kTrailerBytes, b.size());
    if (std::memcmp(p + table_end + 4, kEndMagic, 8) != 0)
      DDP_THROW(IoError, "'{}': no end marker at byte {}", path, table_end + 4);
    if (read_le<uint32_t>(p, table_end) != crc32_of(p + table, count * kEntryBytes))
      DDP_THROW(IoError, "'{}': index table checksum mismatch (bytes {}..{})", path, table,
                table_end - 1);
    for (uint64_t r = 0; r < count; ++r) {
      const std::byte* e = p + table + r * kEntryBytes;
      Entry en{uint32_t(shards_.size()), read_le<uint32_t>(e, 8), read_le<uint64_t>(e, 0),
               read_le<uint32_t>(e, 12), read_le<int32_t>(e, 24), read_le<int64_t>(e, 16), int64_t(r)};
      if (en.offset < kHeaderBytes || en.offset > table || en.length > table - en.offset)
        DDP_THROW(IoError, "'{}': record {} claims bytes {}..{}, outside the records area", path,
                  r, en.offset, en.offset + en.length);
      if (en.label < 0 || en.label >= num_classes())
        DDP_THROW(IoError, "'{}': record {} has label {} of {} classes", path, r, en.label,
                  num_classes());
      entries_.push_back(en);
    }
    shards_.push_back(std::move(file));
  }
}

std::string PackedImageDataset::describe() const {
  return fmt::format("PackedImageDataset({}, {} images in {} shards, {} classes)", folder_,
                     entries_.size(), shards_.size(), num_classes());
}

std::string PackedImageDataset::example_name(int64_t index) const {
  const Entry& e = entries_[size_t(index)];
  return fmt::format("{} record {} (byte offset {}, source image {})",
                     shards_[e.shard].path(), e.record, e.offset, e.original);
}

std::span<const uint8_t> PackedImageDataset::encoded(int64_t index, std::vector<uint8_t>&) const {
  const Entry& e = entries_[size_t(index)];
  const auto* p = reinterpret_cast<const uint8_t*>(shards_[e.shard].bytes().data()) + e.offset;
  if (crc32_of(p, e.length) != e.crc)
    DDP_THROW(IoError, "{}: checksum mismatch, the record is corrupt", example_name(index));
  return {p, e.length};
}

}  // namespace ddp::data
