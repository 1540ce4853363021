#pragma once
// Small POSIX file helpers for io: positioned reads (ReadFile, public in
// ddp/io/file.h for the data layer) and whole writes that retry on EINTR
// and short transfers and raise IoError naming the file and errno. The
// writer is internal to src/io.

#include <cstddef>
#include <string>

#include "ddp/io/file.h"

namespace ddp::io::detail {

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
