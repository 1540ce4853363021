// TensorBoard event files: CRC-32C, TFRecord framing, the Event encoding,
// and the writer. See Note [Event file format]. tests/metrics/
// tensorboard_readback.py reads a trainer's files with TensorBoard itself.

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "ddp/core/error.h"
#include "ddp/metrics/event_file.h"
#include "scratch_dir.h"

namespace ddp::metrics {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s += char(c);
  return s;
}

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(detail::crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(detail::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(detail::crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  // Continuing a CRC equals computing it at once.
  EXPECT_EQ(detail::crc32c("6789", 4, detail::crc32c("12345", 5)), 0xE3069283u);
}

TEST(TfRecord, Framing) {
  const std::string r = detail::tf_record("abc");
  ASSERT_EQ(r.size(), 8u + 4 + 3 + 4);
  uint64_t len = 0;
  std::memcpy(&len, r.data(), 8);
  EXPECT_EQ(len, 3u);
  uint32_t len_crc = 0, data_crc = 0;
  std::memcpy(&len_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 15, 4);
  EXPECT_EQ(len_crc, detail::masked_crc32c(r.data(), 8));
  EXPECT_EQ(r.substr(12, 3), "abc");
  const uint32_t crc = detail::crc32c("abc", 3);
  EXPECT_EQ(data_crc, ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(Event, ScalarEncoding) {
  // wall_time 0.0 (field 1, fixed64), step 3 (field 2, varint), summary
  // (field 5) { value (field 1) { tag "a" (field 1), simple_value 1.0f (field 2, fixed32) } }
  const std::string expected = bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x03, 0x2a, 0x0a, 0x0a,
                                      0x08, 0x0a, 0x01, 'a', 0x15, 0x00, 0x00, 0x80, 0x3f});
  EXPECT_EQ(detail::scalar_event("a", 1.0f, 3, 0.0), expected);
  // A step above 127 takes a two-byte varint: 300 = 0xac 0x02.
  EXPECT_NE(detail::scalar_event("a", 1.0f, 300, 0.0).find(bytes({0x10, 0xac, 0x02})),
            std::string::npos);
}

TEST(Event, FileVersion) {
  const std::string e = detail::file_version_event(0.0);
  EXPECT_EQ(e.substr(9), bytes({0x1a, 13}) + "brain.Event:2");
}

// Reads back the payloads of a file, checking both CRCs of every record.
std::vector<std::string> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t at = 0;
  while (at < data.size()) {
    uint64_t len = 0;
    uint32_t len_crc = 0, data_crc = 0;
    EXPECT_LE(at + 12, data.size());
    std::memcpy(&len, data.data() + at, 8);
    std::memcpy(&len_crc, data.data() + at + 8, 4);
    EXPECT_EQ(len_crc, detail::masked_crc32c(data.data() + at, 8));
    EXPECT_LE(at + 16 + len, data.size());
    out.push_back(data.substr(at + 12, len));
    std::memcpy(&data_crc, data.data() + at + 12 + len, 4);
    EXPECT_EQ(data_crc, detail::masked_crc32c(out.back().data(), len));
    at += 16 + len;
  }
  return out;
}

TEST(EventFileWriter, WritesVersionThenScalars) {
  test::ScratchDir dir;
  std::string path;
  {
    EventFileWriter w(dir.path("run/nested"));
    path = w.path();
    w.add_scalar("train/loss", 2.5, 10, 100.0);
    // Flushed at once: readable while the writer is still open.
    EXPECT_EQ(read_records(path).size(), 2u);
    w.add_scalar("train/lr", 0.1, 20, 101.0);
  }
  EXPECT_NE(path.find("/run/nested/events.out.tfevents."), std::string::npos) << path;
  const auto records = read_records(path);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
  EXPECT_EQ(records[1], detail::scalar_event("train/loss", 2.5f, 10, 100.0));
  EXPECT_EQ(records[2], detail::scalar_event("train/lr", 0.1f, 20, 101.0));
}

TEST(EventFileWriter, TwoWritersInOneDirectoryGetTwoFiles) {
  test::ScratchDir dir;
  EventFileWriter a(dir.path("tb")), b(dir.path("tb"));
  EXPECT_NE(a.path(), b.path());
}

TEST(EventFileWriter, UnwritableDirectoryIsAnErrorNamingIt) {
  test::ScratchDir dir;
  std::ofstream(dir.path("plain_file")) << "x";
  const std::string bad = dir.path("plain_file/tb");  // a file where a folder should be
  try {
    EventFileWriter w(bad);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddp::metrics
