#pragma once
// Memory-mapped files of fixed-size records: the data stays in the page
// cache, shared by every rank and worker on the machine, and opening a
// dataset of any size costs nothing.
//
//   [header_bytes][record 0][record 1]...   each record record_bytes long
//
// RecordFile gives read-only, bounds-checked access to raw records;
// RecordDataset interprets each record as an input array plus an optional
// little-endian unsigned label (e.g. the CIFAR binary files: record 3073,
// label at 0, u8 [3, 32, 32] at 1).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "ddp/data/dataset.h"

namespace ddp::data {

class RecordFile {
 public:
  // Maps `path` read-only. IoError when the file is missing, not a regular
  // file, shorter than the header, or when its body is not a whole number of
  // records (naming the offset where the partial record starts); ValueError
  // for record_bytes <= 0.
  RecordFile(const std::string& path, int64_t record_bytes, int64_t header_bytes = 0);
  ~RecordFile();
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;
  RecordFile(RecordFile&& o) noexcept;
  RecordFile& operator=(RecordFile&& o) noexcept;

  int64_t size() const { return count_; }  // number of records
  int64_t record_bytes() const { return record_bytes_; }
  int64_t header_bytes() const { return header_bytes_; }
  const std::string& path() const { return path_; }
  // Record i; IndexError outside [0, size()).
  std::span<const std::byte> record(int64_t index) const;
  std::span<const std::byte> header() const;
  // The whole file as mapped (header and records), for formats with their
  // own layout inside (Note [Packed image format]).
  std::span<const std::byte> bytes() const { return {base_, mapped_bytes_}; }
  // Byte offset of record i in the file (for error messages).
  int64_t offset_of(int64_t index) const { return header_bytes_ + index * record_bytes_; }

 private:
  std::string path_;
  const std::byte* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  int64_t record_bytes_ = 0, header_bytes_ = 0, count_ = 0;
};

struct RecordLayout {
  int64_t record_bytes = 0;
  int64_t header_bytes = 0;
  // The input: an array of input_dtype with input_shape at input_offset of
  // each record (stored little-endian, as the host reads it).
  int64_t input_offset = 0;
  Shape input_shape;
  DType input_dtype = DType::u8;
  // u8 inputs become f32 / 255 (images in [0, 1]); other dtypes are copied.
  bool u8_to_unit_float = false;
  // The label: label_bytes (1, 2, 4 or 8) at label_offset, or none when
  // label_offset < 0. With num_classes > 0 a label >= num_classes raises
  // IoError naming the file and offset when the example is read.
  int64_t label_offset = -1;
  int label_bytes = 1;
  int64_t num_classes = 0;
};

class RecordDataset final : public Dataset {
 public:
  // ValueError when the input or label does not fit in a record.
  RecordDataset(const std::string& path, RecordLayout layout);
  int64_t size() const override { return file_.size(); }
  std::string describe() const override;
  const RecordFile& file() const { return file_; }

 private:
  void do_read(int64_t index, void* input, void* target) const override;
  RecordFile file_;
  RecordLayout layout_;
};

}  // namespace ddp::data
