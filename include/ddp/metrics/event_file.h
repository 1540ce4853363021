#pragma once
// TensorBoard event files: scalars that `tensorboard --logdir DIR` plots.
//
//   ddp::metrics::EventFileWriter tb("runs/resnet20");
//   tb.add_scalar("train/loss", 0.42, /*step=*/100);
//
// Note [Event file format]
// An event file is a sequence of TFRecords, each
//   uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
//   the payload, uint32 masked CRC-32C of the payload,
// with masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8. Each payload
// is one tensorflow.Event protocol-buffer message; we write the few fields
// TensorBoard's scalar plots read, encoded by hand:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record carries file_version "brain.Event:2". Every scalar is
// flushed at once, so a running or crashed job leaves a readable file
// (like Note [Metrics lines] of the examples).

#include <cstdint>
#include <cstdio>
#include <string>

namespace ddp::metrics {

class EventFileWriter {
 public:
  // Creates `dir` (and its parents) and a new file
  // events.out.tfevents.<unix seconds>.<host>.<pid>[.<n>] in it. Raises
  // IoError naming the directory when it cannot create or write there.
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();  // closes the file; never throws
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One scalar at `step`, stamped with the current time (or wall_time, in
  // seconds since the epoch). TensorBoard stores it as a float. IoError when
  // the write fails (disk full).
  void add_scalar(const std::string& tag, double value, int64_t step);
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);

  std::string path_;
  std::FILE* file_ = nullptr;
};

namespace detail {
// CRC-32C (Castagnoli), continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
uint32_t masked_crc32c(const void* data, size_t size);
// One TFRecord around `payload`.
std::string tf_record(const std::string& payload);
// Event messages (Note [Event file format]).
std::string file_version_event(double wall_time);
std::string scalar_event(const std::string& tag, float value, int64_t step, double wall_time);
}  // namespace detail

}  // namespace ddp::metrics
