// Packed image shards: packing a folder and reading it back (labels, source
// indices, shards split by part), bad images skipped or named when packing,
// and corrupt or truncated shards refused naming the file and record.
#include "ddp/data/packed_images.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "data/data_test_util.h"

namespace ddp::test {
namespace {

namespace fs = std::filesystem;
using data::ImageTransform;

const std::string kImages = std::string(DDP_TEST_DATA_DIR) + "/golden/images/";

// Two classes of the golden photographs: a has 4 images, b has 3.
fs::path make_folder(const ScratchDir& dir) {
  const fs::path root = dir.dir() / "folder";
  const std::vector<std::pair<std::string, std::string>> files = {
      {"a/0.jpg", "rgb420_q75.jpg"}, {"a/1.jpg", "gray.jpg"},      {"a/2.png", "rgb.png"},
      {"a/3.jpg", "cmyk.jpg"},       {"b/0.jpg", "rgb444_q95.jpg"}, {"b/1.jpg", "progressive.jpg"},
      {"b/2.png", "palette.png"}};
  for (const auto& [to, from] : files) {
    fs::create_directories((root / to).parent_path());
    write_bytes((root / to).string(), read_bytes(kImages + from));
  }
  return root;
}

TEST(PackedImages, PackAndReadBackWithLabelsAndSourceIndices) {
  ScratchDir dir;
  const fs::path root = make_folder(dir);
  const std::string out = (dir.dir() / "packed").string();
  const data::PackReport r =
      data::pack_image_folder(root.string(), out, {.shards = 2, .max_side = 100, .quality = 90});
  EXPECT_EQ(r.images, 7);
  EXPECT_EQ(r.skipped, 0);
  ASSERT_EQ(r.shard_paths.size(), 2u);
  const ImageTransform t = ImageTransform::imagenet_eval(32, 36);
  data::PackedImageDataset packed(out, t);
  data::ImageFolderDataset folder(root.string(), t);
  ASSERT_EQ(packed.size(), 7);
  EXPECT_EQ(packed.num_shards(), 2);
  EXPECT_EQ(packed.classes(), folder.classes());
  std::vector<int64_t> seen;
  for (int64_t i = 0; i < packed.size(); ++i) {
    const int64_t src = packed.original_index(i);
    seen.push_back(src);
    EXPECT_EQ(packed.label(i), folder.label(src)) << i;
    const data::Example e = packed.get(i);
    EXPECT_EQ(e.target.item<int64_t>(), folder.label(src));
    EXPECT_EQ(e.input.shape(), (Shape{3, 32, 32}));
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  // Parts: each rank opens only its shards, together all of them.
  data::PackedImageDataset p0(out, t, {.part = 0, .num_parts = 2});
  data::PackedImageDataset p1(out, t, {.part = 1, .num_parts = 2});
  EXPECT_EQ(p0.num_shards(), 1);
  EXPECT_EQ(p0.size() + p1.size(), 7);
}

TEST(PackedImages, BadImagesAreNamedOrSkippedWhenPacking) {
  ScratchDir dir;
  const fs::path root = make_folder(dir);
  const Bytes good = read_bytes(kImages + "rgb420_q75.jpg");
  write_bytes((root / "b" / "3_truncated.jpg").string(),
              Bytes(good.begin(), good.begin() + ptrdiff_t(good.size() / 2)));
  expect_error<IoError>(
      [&] { data::pack_image_folder(root.string(), (dir.dir() / "p1").string()); },
      {"3_truncated.jpg", "truncated"});
  const data::PackReport r = data::pack_image_folder(
      root.string(), (dir.dir() / "p2").string(), {.bad_images = data::BadImagePolicy::skip});
  EXPECT_EQ(r.images, 7);
  EXPECT_EQ(r.skipped, 1);
  ASSERT_EQ(r.skipped_images.size(), 1u);
  EXPECT_NE(r.skipped_images[0].find("3_truncated.jpg"), std::string::npos);
  EXPECT_EQ(data::PackedImageDataset((dir.dir() / "p2").string()).size(), 7);
}

// A packed folder of one shard, and that shard's bytes.
struct OneShard {
  std::string folder, shard;
  Bytes bytes;
};
OneShard pack_one(const ScratchDir& dir) {
  const fs::path root = make_folder(dir);
  OneShard s;
  s.folder = (dir.dir() / "packed").string();
  s.shard = data::pack_image_folder(root.string(), s.folder, {.max_side = 64}).shard_paths.at(0);
  s.bytes = read_bytes(s.shard);
  return s;
}

uint64_t u64_at(const Bytes& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}

TEST(PackedImages, TruncatedAndCorruptShardsAreRefusedNamingFileAndRecord) {
  ScratchDir dir;
  const OneShard s = pack_one(dir);
  // Truncated (a half-copied file).
  write_bytes(s.shard, Bytes(s.bytes.begin(), s.bytes.begin() + ptrdiff_t(s.bytes.size() * 2 / 3)));
  expect_error<IoError>([&] { data::PackedImageDataset ds(s.folder); },
                        {s.shard, "truncated or corrupt"});
  // A flipped bit in the header.
  Bytes b = s.bytes;
  b[26] ^= 1;
  write_bytes(s.shard, b);
  expect_error<IoError>([&] { data::PackedImageDataset ds(s.folder); },
                        {s.shard, "header checksum mismatch"});
  // ... in the index table.
  const uint64_t table = u64_at(s.bytes, 32);
  b = s.bytes;
  b[table + 40] ^= 1;
  write_bytes(s.shard, b);
  expect_error<IoError>([&] { data::PackedImageDataset ds(s.folder); },
                        {s.shard, "index table checksum mismatch"});
  // ... in the JPEG of record 2: the shard opens, reading that record fails.
  const uint64_t offset2 = u64_at(s.bytes, table + 2 * 32);
  b = s.bytes;
  b[offset2 + 100] ^= 0x10;
  write_bytes(s.shard, b);
  data::PackedImageDataset ds(s.folder, ImageTransform::imagenet_train(16));
  std::vector<float> in(3 * 16 * 16);
  int64_t label = 0;
  ds.read(1, in.data(), &label);  // its neighbours are fine
  expect_error<IoError>([&] { ds.read(2, in.data(), &label); },
                        {s.shard, "record 2", "byte offset " + std::to_string(offset2),
                         "checksum mismatch"});
  // Skipping: the bad record is replaced by the next one and counted.
  data::PackedImageDataset skip(s.folder, ImageTransform::imagenet_train(16),
                                {.bad_images = data::BadImagePolicy::skip});
  skip.read(2, in.data(), &label);
  EXPECT_EQ(label, skip.label(3));
  EXPECT_EQ(skip.bad_count(), 1);
  // Not a packed folder at all.
  expect_error<IoError>([&] { data::PackedImageDataset bad(dir.dir().string()); },
                        {"classes.txt", "not a packed image folder"});
}

// Offsets near 2^64 whose sums wrap around to a small number passed the
// bounds checks and pointed before the mapped file (found by fuzzing:
// tests/fuzz/corpus/packed_images/regression_*_offset_wraps).
TEST(PackedImages, OffsetsThatWrapAroundAreRefused) {
  ScratchDir dir;
  const OneShard s = pack_one(dir);
  auto put = [](Bytes& b, size_t at, auto v) { std::memcpy(b.data() + at, &v, sizeof v); };
  // The index table's offset: 3 entries at 2^64 - 8 end at byte 88 of a
  // 100-byte file, just where the table's checksum and end marker lie.
  Bytes b(s.bytes.begin(), s.bytes.begin() + 64);
  b.resize(100);
  put(b, 24, uint64_t(3));
  put(b, 32, ~uint64_t(0) - 7);
  put(b, 60, crc32(Bytes(b.begin(), b.begin() + 60)));
  std::memcpy(b.data() + 92, "DDPEND1\n", 8);
  write_bytes(s.shard, b);
  expect_error<IoError>([&] { data::PackedImageDataset ds(s.folder); },
                        {s.shard, "truncated or corrupt", "index table at byte 18446744073709551608"});
  // A record's offset: 2^64 - 4 plus its length wraps to below the table.
  const uint64_t table = u64_at(s.bytes, 32), count = u64_at(s.bytes, 24);
  b = s.bytes;
  put(b, table, ~uint64_t(0) - 3);
  put(b, table + count * 32,
      crc32(Bytes(b.begin() + ptrdiff_t(table), b.begin() + ptrdiff_t(table + count * 32))));
  write_bytes(s.shard, b);
  expect_error<IoError>([&] { data::PackedImageDataset ds(s.folder); },
                        {s.shard, "record 0 claims bytes 18446744073709551612", "outside the records area"});
}

}  // namespace
}  // namespace ddp::test
