#pragma once
// Packed image shards: an image folder re-encoded into a few large
// memory-mapped files, so that a cluster reads big sequential files instead
// of a million small ones, and a rank can read only its own shards.
// tools/pack_images writes them (pack_image_folder); PackedImageDataset
// reads them with the same transforms as ImageFolderDataset.
//
// Usage:
//   data::pack_image_folder("/data/imagenet/train", "/data/packed/train",
//                           {.shards = 64, .max_side = 500, .quality = 90});
//   auto train = std::make_shared<data::PackedImageDataset>(
//       "/data/packed/train", data::ImageTransform::imagenet_train());
//
// Note [Packed image format]
// A packed folder holds classes.txt (the class names, one per line, label i
// on line i) and shard-NNNNN.ddpimg files. A shard, all integers
// little-endian:
//
//   offset  size  field
//   0       8     magic "DDPIMG1\n"
//   8       4     u32 format version (1)
//   12      4     u32 shard number; 16: u32 shard count
//   20      4     u32 number of classes
//   24      8     u64 record count N
//   32      8     u64 byte offset of the index table (after the records)
//   40      4     u32 max side the images were re-encoded at; 44: u32 JPEG quality
//   48      12    reserved, zero
//   60      4     u32 CRC-32 of bytes 0..59
//   64      ...   the records: the JPEG bytes of each image, back to back,
//                 each starting at a multiple of 8 (zero padding)
//   T       32*N  the index table, one entry per record:
//                   u64 byte offset of the JPEG, u32 its length,
//                   u32 CRC-32 of the JPEG bytes, i64 the image's index in
//                   the source folder (its ImageFolder order), i32 label,
//                   u16 width, u16 height (of the re-encoded image)
//   T+32N   4     u32 CRC-32 of the index table; then "DDPEND1\n" (8)
//
// Opening a shard checks the magic, version, header CRC, that the file is
// long enough for its index table and end marker, the table's CRC and that
// every record lies between the header and the table; reading a record
// checks its CRC (CRC-32 runs at gigabytes per second, a small cost beside
// decoding). Any failure is an IoError naming the file and, for a record,
// its number and byte offset, so a corrupt or half-copied shard is refused
// instead of training on garbage. Images are stored in the order the packer
// shuffled them (a seeded permutation), so one shard read sequentially is a
// mix of every class.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ddp/data/image_folder.h"
#include "ddp/data/record_file.h"

namespace ddp::data {

struct PackOptions {
  int64_t shards = 1;
  int64_t max_side = 500;  // longer side after re-encoding (smaller images are kept as they are)
  int64_t quality = 90;    // JPEG quality of the re-encoded images
  uint64_t seed = 0;       // the shuffle of the records
  BadImagePolicy bad_images = BadImagePolicy::raise;  // skip: left out, counted
  int threads = 1;         // decoding and encoding threads
};

struct PackReport {
  int64_t images = 0, skipped = 0;
  int64_t bytes_in = 0, bytes_out = 0;
  std::vector<std::string> shard_paths;
  std::vector<std::string> skipped_images;  // their error messages
};

// Packs an ImageFolder (Note [ImageFolder semantics]) into `output` (created
// if needed). IoError for an unreadable folder, a bad image (unless
// skipped), or an unwritable output; ValueError for bad options.
PackReport pack_image_folder(const std::string& input, const std::string& output,
                             const PackOptions& options = {});

struct PackedOptions {
  BadImagePolicy bad_images = BadImagePolicy::raise;
  // Read only the shards s with s % num_parts == part (a rank's own); the
  // default reads them all.
  int64_t part = 0, num_parts = 1;
};

class PackedImageDataset final : public EncodedImageDataset {
 public:
  // Opens and checks every shard of `folder` (Note [Packed image format]).
  PackedImageDataset(const std::string& folder,
                     ImageTransform transform = ImageTransform::imagenet_train(),
                     PackedOptions options = {});

  int64_t size() const override { return int64_t(entries_.size()); }
  std::string describe() const override;
  int64_t label(int64_t index) const override { return entries_.at(size_t(index)).label; }
  // The example's index in the folder it was packed from.
  int64_t original_index(int64_t index) const { return entries_.at(size_t(index)).original; }
  int64_t num_shards() const { return int64_t(shards_.size()); }

 private:
  struct Entry {
    uint32_t shard;
    uint32_t length;
    uint64_t offset;
    uint32_t crc;
    int32_t label;
    int64_t original;
    int64_t record;  // within its shard
  };
  std::span<const uint8_t> encoded(int64_t index, std::vector<uint8_t>& buffer) const override;
  std::string example_name(int64_t index) const override;
  std::string folder_;
  std::vector<RecordFile> shards_;
  std::vector<Entry> entries_;
};

}  // namespace ddp::data
