#pragma once
// Positioned reads of a whole file that retry on EINTR and short reads and
// raise IoError naming the file and errno: io's own reader (safetensors,
// checkpoints), public because the data layer reads its dataset files with
// it too (src/data/data_util.cpp). Not meant for applications. io's writer,
// AtomicWriteFile, stays private (src/io/file.h).

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

}  // namespace ddp::io::detail
