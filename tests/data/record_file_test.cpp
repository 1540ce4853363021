// Memory-mapped record files: raw records, bounds, headers, truncation, and
// RecordDataset's input/label decoding.
#include "ddp/data/record_file.h"

#include <cstring>

#include "data/data_test_util.h"

namespace ddp::test {
namespace {

using data::RecordDataset;
using data::RecordFile;
using data::RecordLayout;

// A 4-byte header "HDR!" and n records of 6 bytes: label byte, then 5 bytes
// r*10 .. r*10+4.
Bytes records(int n, uint8_t bad_label_at = 255) {
  Bytes b{'H', 'D', 'R', '!'};
  for (int r = 0; r < n; ++r) {
    b.push_back(r == bad_label_at ? 200 : uint8_t(r % 3));
    for (int k = 0; k < 5; ++k) b.push_back(uint8_t(r * 10 + k));
  }
  return b;
}

TEST(RecordFile, MapsRecordsAfterTheHeader) {
  ScratchDir dir;
  write_bytes(dir.path("r.bin"), records(4));
  RecordFile f(dir.path("r.bin"), 6, 4);
  EXPECT_EQ(f.size(), 4);
  EXPECT_EQ(f.record_bytes(), 6);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.header().data()), 4), "HDR!");
  auto r2 = f.record(2);
  ASSERT_EQ(r2.size(), 6u);
  EXPECT_EQ(uint8_t(r2[0]), 2);
  EXPECT_EQ(uint8_t(r2[1]), 20);
  EXPECT_EQ(uint8_t(r2[5]), 24);
  EXPECT_EQ(f.offset_of(3), 4 + 18);
  // Moving keeps the mapping valid.
  RecordFile g(std::move(f));
  EXPECT_EQ(uint8_t(g.record(3)[1]), 30);
  EXPECT_EQ(f.size(), 0);
}

TEST(RecordFile, BoundsAreChecked) {
  ScratchDir dir;
  write_bytes(dir.path("r.bin"), records(2));
  RecordFile f(dir.path("r.bin"), 6, 4);
  expect_error<IndexError>([&] { f.record(2); }, {"r.bin", "record 2", "[0, 2)"});
  EXPECT_THROW(f.record(-1), IndexError);
  write_bytes(dir.path("empty.bin"), {});
  RecordFile e(dir.path("empty.bin"), 6);
  EXPECT_EQ(e.size(), 0);
  EXPECT_THROW(e.record(0), IndexError);
}

TEST(RecordFile, BadFilesNameThePathAndOffset) {
  ScratchDir dir;
  expect_error<IoError>([&] { RecordFile(dir.path("missing.bin"), 6); }, {"missing.bin"});
  Bytes b = records(3);
  b.resize(b.size() - 2);  // the last record has 4 of 6 bytes
  write_bytes(dir.path("cut.bin"), b);
  expect_error<IoError>([&] { RecordFile(dir.path("cut.bin"), 6, 4); },
                        {dir.path("cut.bin"), "truncated", "byte offset 16", "4 of its 6 bytes"});
  write_bytes(dir.path("tiny.bin"), Bytes{'H', 'D'});
  expect_error<IoError>([&] { RecordFile(dir.path("tiny.bin"), 6, 4); },
                        {"tiny.bin", "byte offset 2", "4-byte header"});
  EXPECT_THROW(RecordFile(dir.path("tiny.bin"), 0), ValueError);
  expect_error<IoError>([&] { RecordFile(dir.dir().string(), 6); }, {"not a regular file"});
}

TEST(RecordDataset, DecodesInputsAndLabels) {
  ScratchDir dir;
  write_bytes(dir.path("r.bin"), records(5));
  RecordLayout raw{.record_bytes = 6,
                   .header_bytes = 4,
                   .input_offset = 1,
                   .input_shape = {5},
                   .label_offset = 0,
                   .num_classes = 3};
  RecordDataset d(dir.path("r.bin"), raw);
  EXPECT_EQ(d.size(), 5);
  EXPECT_EQ(d.spec().input_dtype, kUInt8);
  data::Example e = d.get(4);
  EXPECT_EQ(values_of<uint8_t>(e.input), (std::vector<uint8_t>{40, 41, 42, 43, 44}));
  EXPECT_EQ(e.target.item<int64_t>(), 1);

  RecordLayout unit = raw;
  unit.u8_to_unit_float = true;
  unit.input_shape = {1, 5};
  RecordDataset f(dir.path("r.bin"), unit);
  EXPECT_EQ(f.spec().input_dtype, kFloat32);
  EXPECT_EQ(values_of<float>(f.get(1).input)[4], 14.0f / 255.0f);

  // A wider little-endian label and no label at all.
  RecordLayout wide{.record_bytes = 6,
                    .header_bytes = 4,
                    .input_offset = 2,
                    .input_shape = {1},
                    .input_dtype = DType::i32,
                    .label_offset = 0,
                    .label_bytes = 2};
  data::Example w = RecordDataset(dir.path("r.bin"), wide).get(1);
  EXPECT_EQ(w.target.item<int64_t>(), 1 + 10 * 256);
  EXPECT_EQ(w.input.item<int32_t>(), 11 + (12 << 8) + (13 << 16) + (14 << 24));
  RecordLayout none{.record_bytes = 6, .header_bytes = 4, .input_shape = {6}};
  RecordDataset n(dir.path("r.bin"), none);
  EXPECT_FALSE(n.spec().has_target);
  EXPECT_FALSE(n.get(0).target.defined());
}

TEST(RecordDataset, LabelOutOfRangeNamesFileAndOffset) {
  ScratchDir dir;
  write_bytes(dir.path("r.bin"), records(4, /*bad_label_at=*/2));
  RecordLayout l{.record_bytes = 6,
                 .header_bytes = 4,
                 .input_offset = 1,
                 .input_shape = {5},
                 .label_offset = 0,
                 .num_classes = 3};
  RecordDataset d(dir.path("r.bin"), l);
  EXPECT_NO_THROW(d.get(1));
  expect_error<IoError>([&] { d.get(2); }, {"r.bin", "label 200", "record 2", "byte offset 16"});
}

TEST(RecordDataset, LayoutMustFitTheRecord) {
  ScratchDir dir;
  write_bytes(dir.path("r.bin"), records(2));
  RecordLayout l{.record_bytes = 6, .header_bytes = 4, .input_offset = 2, .input_shape = {5}};
  expect_error<ValueError>([&] { RecordDataset(dir.path("r.bin"), l); },
                           {"does not fit", "6-byte record"});
  l.input_shape = {4};
  l.label_offset = 5;
  l.label_bytes = 2;
  EXPECT_THROW(RecordDataset(dir.path("r.bin"), l), ValueError);
  l.label_bytes = 3;
  EXPECT_THROW(RecordDataset(dir.path("r.bin"), l), ValueError);
}

}  // namespace
}  // namespace ddp::test
