#pragma once
// Small POSIX file helpers for io: positioned reads and whole writes that
// retry on EINTR and short transfers and raise IoError naming the file and
// errno. Internal to src/io.

#include <cstddef>
#include <cstdint>
#include <string>

namespace ddp::io::detail {

// A file opened for reading; closed by the destructor.
class ReadFile {
 public:
  explicit ReadFile(const std::string& path);  // IoError when it cannot be opened
  ~ReadFile();
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;

  uint64_t size() const { return size_; }
  // Reads exactly n bytes at offset; IoError on failure or end of file.
  void read_at(uint64_t offset, void* dst, size_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Writes to a temporary file beside `path` and renames it over `path` in
// commit(); a WriteFile destroyed without commit() removes the temporary, so
// a failed save leaves any earlier file at `path` intact.
class AtomicWriteFile {
 public:
  explicit AtomicWriteFile(const std::string& path);
  ~AtomicWriteFile();
  AtomicWriteFile(const AtomicWriteFile&) = delete;
  AtomicWriteFile& operator=(const AtomicWriteFile&) = delete;

  void write(const void* src, size_t n);
  void commit();

 private:
  std::string path_, tmp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace ddp::io::detail
