// POSIX file helpers (file.h).

#include "io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"

namespace ddp::io::detail {

ReadFile::ReadFile(const std::string& path) : path_(path) {
  do {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) DDP_THROW(IoError, "cannot open '{}' for reading: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    DDP_THROW(IoError, "cannot stat '{}': {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    DDP_THROW(IoError, "'{}' is not a regular file", path);
  }
  size_ = uint64_t(st.st_size);
}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadFile::read_at(uint64_t offset, void* dst, size_t n) const {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd_, p, n, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      DDP_THROW(IoError, "reading {} bytes at offset {} of '{}' failed: {}", n, offset, path_,
                std::strerror(errno));
    if (got == 0)
      DDP_THROW(IoError,
                "'{}' ended at offset {} while {} more bytes were expected (was it "
                "truncated while being read?)",
                path_, offset, n);
    p += got;
    n -= size_t(got);
    offset += uint64_t(got);
  }
}

AtomicWriteFile::AtomicWriteFile(const std::string& path)
    : path_(path), tmp_path_(fmt::format("{}.tmp.{}", path, ::getpid())) {
  do {
    fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0)
    DDP_THROW(IoError, "cannot create '{}' (to write '{}'): {}", tmp_path_, path_,
              std::strerror(errno));
}

// Destructors log, never throw: an unfinished file is removed quietly.
AtomicWriteFile::~AtomicWriteFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && ::unlink(tmp_path_.c_str()) != 0 && errno != ENOENT)
    DDP_LOG_WARNING("cannot remove the unfinished file '{}': {}", tmp_path_, std::strerror(errno));
}

void AtomicWriteFile::write(const void* src, size_t n) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    ssize_t put = ::write(fd_, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) DDP_THROW(IoError, "writing '{}' failed: {}", tmp_path_, std::strerror(errno));
    p += put;
    n -= size_t(put);
  }
}

void AtomicWriteFile::commit() {
  // close() reports delayed write errors (NFS, full disks), so it is checked.
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    DDP_THROW(IoError, "writing '{}' failed at close: {}", tmp_path_, std::strerror(errno));
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    DDP_THROW(IoError, "cannot rename '{}' to '{}': {}", tmp_path_, path_, std::strerror(errno));
  committed_ = true;
}

}  // namespace ddp::io::detail
