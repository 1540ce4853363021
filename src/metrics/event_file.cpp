#include "ddp/metrics/event_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"

namespace ddp::metrics {
namespace detail {
namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected poly
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Protocol-buffer wire format: varints, fixed-width little-endian numbers
// and length-delimited fields.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += char(v);
}
template <class T> void put_fixed(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // x86/ARM Linux are little-endian, as the format is
  out.append(bytes, sizeof(T));
}
void put_key(std::string& out, int field, int wire_type) { put_varint(out, uint64_t(field << 3 | wire_type)); }
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, 1);  // wall_time: double
  put_fixed(e, wall_time);
  if (step != 0) {
    put_key(e, 2, 0);  // step: int64 varint (two's complement for negatives)
    put_varint(e, uint64_t(step));
  }
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tf_record(const std::string& payload) {
  std::string r;
  put_fixed(r, uint64_t(payload.size()));
  put_fixed(r, masked_crc32c(r.data(), 8));
  r += payload;
  put_fixed(r, masked_crc32c(payload.data(), payload.size()));
  return r;
}

std::string file_version_event(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string scalar_event(const std::string& tag, float value, int64_t step, double wall_time) {
  std::string v;
  put_bytes(v, 1, tag);
  put_key(v, 2, 5);  // simple_value: float
  put_fixed(v, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

}  // namespace detail

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    DDP_THROW(IoError, "tensorboard: cannot create the directory '{}': {}", dir, ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const std::string base = fmt::format("{}/events.out.tfevents.{}.{}.{}", dir,
                                       int64_t(now_seconds()), host, int(getpid()));
  // O_EXCL: two writers in one second and process get distinct files.
  for (int n = 0; n < 1000 && file_ == nullptr; ++n) {
    path_ = n == 0 ? base : fmt::format("{}.{}", base, n);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      file_ = fdopen(fd, "wb");
    } else if (errno != EEXIST) {
      DDP_THROW(IoError, "tensorboard: cannot write an event file in '{}': {}", dir,
                std::strerror(errno));
    }
  }
  if (file_ == nullptr)
    DDP_THROW(IoError, "tensorboard: cannot create an event file in '{}'", dir);
  write_record(detail::file_version_event(now_seconds()));
}

EventFileWriter::~EventFileWriter() {
  if (file_ != nullptr && std::fclose(file_) != 0)
    DDP_LOG_ERROR("tensorboard: closing '{}' failed: {}", path_, std::strerror(errno));
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  add_scalar(tag, value, step, now_seconds());
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step,
                                 double wall_time) {
  write_record(detail::scalar_event(tag, float(value), step, wall_time));
}

void EventFileWriter::write_record(const std::string& payload) {
  const std::string record = detail::tf_record(payload);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0)
    DDP_THROW(IoError, "tensorboard: writing '{}' failed: {}", path_, std::strerror(errno));
}

}  // namespace ddp::metrics
