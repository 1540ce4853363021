// Memory-mapped fixed-record files (record_file.h).

#include "ddp/data/record_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "data/data_util.h"
#include "ddp/core/logging.h"

namespace ddp::data {

RecordFile::RecordFile(const std::string& path, int64_t record_bytes, int64_t header_bytes)
    : path_(path), record_bytes_(record_bytes), header_bytes_(header_bytes) {
  DDP_CHECK(record_bytes > 0, "RecordFile('{}'): record_bytes {} must be positive", path,
            record_bytes);
  DDP_CHECK(header_bytes >= 0, "RecordFile('{}'): header_bytes {} must not be negative", path,
            header_bytes);
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) DDP_THROW(IoError, "cannot open '{}' for reading: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    DDP_THROW(IoError, "'{}' is not a regular file", path);
  }
  const auto size = int64_t(st.st_size);
  if (size < header_bytes) {
    ::close(fd);
    DDP_THROW(IoError, "'{}' is truncated: it ends at byte offset {} inside the {}-byte header",
              path, size, header_bytes);
  }
  const int64_t body = size - header_bytes;
  if (body % record_bytes != 0) {
    ::close(fd);
    DDP_THROW(IoError,
              "'{}' is truncated: the last record starts at byte offset {} but has only {} of "
              "its {} bytes",
              path, header_bytes + body / record_bytes * record_bytes, body % record_bytes,
              record_bytes);
  }
  count_ = body / record_bytes;
  if (size > 0) {
    // Read-only and private: the dataset cannot change the file, and pages
    // are shared with every other process mapping it.
    void* p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      DDP_THROW(IoError, "cannot map '{}' ({} bytes): {}", path, size, std::strerror(err));
    }
    base_ = static_cast<const std::byte*>(p);
    mapped_bytes_ = size_t(size);
  }
  ::close(fd);  // the mapping stays valid
}

RecordFile::~RecordFile() {
  if (base_ && ::munmap(const_cast<std::byte*>(base_), mapped_bytes_) != 0)
    DDP_LOG_WARNING("munmap of '{}' failed: {}", path_, std::strerror(errno));
}

RecordFile::RecordFile(RecordFile&& o) noexcept
    : path_(std::move(o.path_)),
      base_(std::exchange(o.base_, nullptr)),
      mapped_bytes_(std::exchange(o.mapped_bytes_, 0)),
      record_bytes_(o.record_bytes_),
      header_bytes_(o.header_bytes_),
      count_(std::exchange(o.count_, 0)) {}

RecordFile& RecordFile::operator=(RecordFile&& o) noexcept {
  if (this != &o) {
    RecordFile tmp(std::move(o));
    std::swap(path_, tmp.path_);
    std::swap(base_, tmp.base_);
    std::swap(mapped_bytes_, tmp.mapped_bytes_);
    std::swap(record_bytes_, tmp.record_bytes_);
    std::swap(header_bytes_, tmp.header_bytes_);
    std::swap(count_, tmp.count_);
  }
  return *this;
}

std::span<const std::byte> RecordFile::record(int64_t index) const {
  if (index < 0 || index >= count_)
    DDP_THROW(IndexError, "'{}': record {} is out of range [0, {})", path_, index, count_);
  return {base_ + offset_of(index), size_t(record_bytes_)};
}

std::span<const std::byte> RecordFile::header() const {
  return {base_, base_ ? size_t(header_bytes_) : 0};
}

// ---- RecordDataset ----------------------------------------------------------

static ExampleSpec record_spec(const RecordLayout& l) {
  ExampleSpec s;
  s.input_shape = l.input_shape;
  s.input_dtype = l.u8_to_unit_float && l.input_dtype == DType::u8 ? DType::f32 : l.input_dtype;
  s.has_target = l.label_offset >= 0;
  return s;
}

RecordDataset::RecordDataset(const std::string& path, RecordLayout layout)
    : Dataset(record_spec(layout)),
      file_(path, layout.record_bytes, layout.header_bytes),
      layout_(std::move(layout)) {
  const RecordLayout& l = layout_;
  for (int64_t d : l.input_shape)
    DDP_CHECK_T(ShapeError, d >= 0, "RecordDataset('{}'): bad input shape {}", path,
                shape_str(l.input_shape));
  const int64_t in_bytes = shape_numel(l.input_shape) * int64_t(element_size(l.input_dtype));
  DDP_CHECK(l.input_offset >= 0 && l.input_offset + in_bytes <= l.record_bytes,
            "RecordDataset('{}'): input {}{} at offset {} does not fit in a {}-byte record", path,
            dtype_name(l.input_dtype), shape_str(l.input_shape), l.input_offset, l.record_bytes);
  if (l.label_offset >= 0) {
    DDP_CHECK(l.label_bytes == 1 || l.label_bytes == 2 || l.label_bytes == 4 || l.label_bytes == 8,
              "RecordDataset('{}'): label_bytes {} is not 1, 2, 4 or 8", path, l.label_bytes);
    DDP_CHECK(l.label_offset + l.label_bytes <= l.record_bytes,
              "RecordDataset('{}'): a {}-byte label at offset {} does not fit in a {}-byte record",
              path, l.label_bytes, l.label_offset, l.record_bytes);
  }
  DDP_CHECK(l.num_classes >= 0, "RecordDataset('{}'): num_classes {} < 0", path, l.num_classes);
}

std::string RecordDataset::describe() const {
  return fmt::format("RecordDataset({}, {} records of {} bytes)", file_.path(), file_.size(),
                     file_.record_bytes());
}

void RecordDataset::do_read(int64_t index, void* input, void* target) const {
  const RecordLayout& l = layout_;
  const std::byte* rec = file_.record(index).data();
  const int64_t n = shape_numel(l.input_shape);
  if (l.u8_to_unit_float && l.input_dtype == DType::u8)
    detail::u8_to_unit_float(reinterpret_cast<const uint8_t*>(rec + l.input_offset),
                             static_cast<float*>(input), n);
  else
    std::memcpy(input, rec + l.input_offset, size_t(n) * element_size(l.input_dtype));
  if (l.label_offset < 0) return;
  uint64_t label = 0;  // little-endian: the low bytes come first
  std::memcpy(&label, rec + l.label_offset, size_t(l.label_bytes));
  if (l.num_classes > 0 && label >= uint64_t(l.num_classes))
    DDP_THROW(IoError, "'{}': label {} of record {} at byte offset {} is out of range [0, {})",
              file_.path(), label, index, file_.offset_of(index) + l.label_offset, l.num_classes);
  *static_cast<int64_t*>(target) = int64_t(label);
}

}  // namespace ddp::data
