// IDX files and MnistDataset: Debian's Fashion-MNIST against values read
// independently by Python (tests/golden/make_fashion_mnist_golden.py),
// generated raw and gzip files, and every kind of bad file.
#include <filesystem>
#include <memory>

#include "data/data_test_util.h"
#include "ddp/data/vision.h"
#include "golden/fashion_mnist_expected.h"

namespace ddp::test {
namespace {

using data::MnistDataset;
using data::Split;

const char* kFashionRoot = "/usr/share/datasets/fashion-mnist";

// Both splits are read once for the whole suite (60000 gzip images take a
// moment).
class FashionMnist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(std::string(kFashionRoot) + "/train-images-idx3-ubyte.gz")) return;
    train_ = std::make_unique<MnistDataset>(kFashionRoot, Split::train);
    test_ = std::make_unique<MnistDataset>(kFashionRoot, Split::test);
  }
  static void TearDownTestSuite() {
    train_.reset();
    test_.reset();
  }
  void SetUp() override {
    if (!train_)
      GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
  }
  static std::unique_ptr<MnistDataset> train_, test_;
};
std::unique_ptr<MnistDataset> FashionMnist::train_, FashionMnist::test_;

TEST_F(FashionMnist, SizesShapesAndFirstLabelsMatchPython) {
  const MnistDataset* splits[2] = {train_.get(), test_.get()};
  for (int s = 0; s < 2; ++s) {
    const auto& g = golden::kFashionMnist[s];
    const MnistDataset& d = *splits[s];
    SCOPED_TRACE(g.prefix);
    ASSERT_EQ(d.size(), g.count);
    EXPECT_EQ(d.spec().input_shape, (Shape{1, 28, 28}));
    EXPECT_EQ(d.spec().input_dtype, kFloat32);
    EXPECT_TRUE(d.spec().target_shape.empty());
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(d.label(i), g.first_labels[i]) << i;
      EXPECT_EQ(d.get(i).target.item<int64_t>(), g.first_labels[i]) << i;
    }
    int64_t hist[10] = {};
    for (int64_t i = 0; i < d.size(); ++i) ++hist[d.label(i)];
    for (int c = 0; c < 10; ++c) EXPECT_EQ(hist[c], g.label_histogram[c]) << c;
  }
}

TEST_F(FashionMnist, FirstImageIsScaledToUnitRange) {
  const MnistDataset* splits[2] = {train_.get(), test_.get()};
  for (int s = 0; s < 2; ++s) {
    const auto& g = golden::kFashionMnist[s];
    std::vector<float> x = values_of<float>(splits[s]->get(0).input);
    ASSERT_EQ(x.size(), 784u);
    for (const auto& p : g.first_image_pixels)
      EXPECT_EQ(x[size_t(p[0] * 28 + p[1])], float(p[2]) / 255.0f) << p[0] << "," << p[1];
    double sum = 0;
    for (float v : x) {
      EXPECT_GE(v, 0.0f);
      EXPECT_LE(v, 1.0f);
      sum += double(v) * 255.0;
    }
    EXPECT_NEAR(sum, double(g.first_image_sum), 1e-2);
  }
}

// Three 2x3 images with bytes 0..17 and labels 7, 0, 9.
struct TinyIdx {
  Bytes images = idx_bytes({3, 2, 3}, [] {
    Bytes b;
    for (int i = 0; i < 18; ++i) b.push_back(uint8_t(i * 15));
    return b;
  }());
  Bytes labels = idx_bytes({3}, {7, 0, 9});
};

TEST(Idx, RawAndGzipFilesReadTheSame) {
  ScratchDir dir;
  TinyIdx t;
  write_bytes(dir.path("img"), t.images);
  write_bytes(dir.path("lab"), t.labels);
  write_bytes(dir.path("img.gz"), gzip_stored(t.images));
  write_bytes(dir.path("lab.gz"), gzip_stored(t.labels));
  data::IdxArray raw = data::read_idx(dir.path("img"));
  data::IdxArray gz = data::read_idx(dir.path("img.gz"));
  EXPECT_EQ(raw.dims, (std::vector<int64_t>{3, 2, 3}));
  EXPECT_FALSE(raw.gzip);
  EXPECT_TRUE(gz.gzip);
  EXPECT_EQ(raw.dims, gz.dims);
  EXPECT_EQ(raw.data, gz.data);
  ASSERT_EQ(raw.data.size(), 18u);
  EXPECT_EQ(raw.data[17], 255);

  MnistDataset a(dir.path("img"), dir.path("lab")), b(dir.path("img.gz"), dir.path("lab.gz"));
  ASSERT_EQ(a.size(), 3);
  EXPECT_EQ(a.spec().input_shape, (Shape{1, 2, 3}));
  for (int64_t i = 0; i < 3; ++i) {
    data::Example ea = a.get(i), eb = b.get(i);
    EXPECT_EQ(values_of<float>(ea.input), values_of<float>(eb.input));
    std::vector<float> x = values_of<float>(ea.input);
    for (int p = 0; p < 6; ++p) EXPECT_EQ(x[size_t(p)], float((i * 6 + p) * 15) / 255.0f);
  }
  EXPECT_EQ(a.get(0).target.item<int64_t>(), 7);
  EXPECT_EQ(a.get(2).target.item<int64_t>(), 9);
  EXPECT_EQ(a.get(1).target.dtype(), kInt64);
}

TEST(Idx, RootLookupFindsRawOrGzipNames) {
  ScratchDir dir;
  TinyIdx t;
  write_bytes(dir.path("t10k-images-idx3-ubyte"), t.images);
  write_bytes(dir.path("t10k-labels-idx1-ubyte.gz"), gzip_stored(t.labels));
  MnistDataset d(dir.dir().string(), Split::test);
  EXPECT_EQ(d.size(), 3);
  EXPECT_EQ(d.label(2), 9);
  expect_error<IoError>([&] { MnistDataset(dir.dir().string(), Split::train); },
                        {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz"});
}

TEST(Idx, MissingFileNamesIt) {
  ScratchDir dir;
  expect_error<IoError>([&] { data::read_idx(dir.path("nope.idx")); }, {"nope.idx"});
}

TEST(Idx, WrongMagicNamesFileAndOffset) {
  ScratchDir dir;
  Bytes b = TinyIdx().images;
  b[0] = 0x1f;
  b[1] = 0x00;
  write_bytes(dir.path("bad"), b);
  expect_error<IoError>([&] { data::read_idx(dir.path("bad")); },
                        {dir.path("bad"), "magic", "byte offset 0"});
  b = TinyIdx().images;
  b[2] = 0x0D;  // float elements
  write_bytes(dir.path("f32"), b);
  expect_error<IoError>([&] { data::read_idx(dir.path("f32")); },
                        {dir.path("f32"), "0x0d", "byte offset 2"});
}

TEST(Idx, TruncatedRawFileNamesOffset) {
  ScratchDir dir;
  Bytes b = TinyIdx().images;  // header 16 bytes + 18 data bytes
  b.resize(30);
  write_bytes(dir.path("short"), b);
  expect_error<IoError>([&] { data::read_idx(dir.path("short")); },
                        {dir.path("short"), "truncated", "up to byte 34", "byte offset 30"});
  write_bytes(dir.path("hdr"), Bytes{0, 0, 8, 3, 0, 0});
  expect_error<IoError>([&] { data::read_idx(dir.path("hdr")); },
                        {dir.path("hdr"), "truncated", "byte offset 6"});
  b = TinyIdx().images;
  b.push_back(1);
  write_bytes(dir.path("long"), b);
  expect_error<IoError>([&] { data::read_idx(dir.path("long")); },
                        {dir.path("long"), "1 unexpected bytes", "byte offset 34"});
}

// Found by tests/fuzz/idx_fuzz.cpp: 2^20 x 2^20 x 2^24 elements is 2^64,
// which wrapped round to 0 in int64 and so matched a header-only file.
TEST(Idx, DimensionsWhoseProductOverflowsAreRejected) {
  ScratchDir dir;
  write_bytes(dir.path("wrap"), Bytes{0, 0, 8, 3, 0, 0x10, 0, 0, 0, 0x10, 0, 0, 1, 0, 0, 0});
  expect_error<IoError>([&] { data::read_idx(dir.path("wrap")); },
                        {dir.path("wrap"), "implausible IDX dimensions", "[1048576, 1048576, 16777216]"});
  // Just inside the limit the dimensions are read, and the file is short.
  write_bytes(dir.path("big"), Bytes{0, 0, 8, 2, 0, 0x10, 0, 0, 0, 0x10, 0, 0});
  expect_error<IoError>([&] { data::read_idx(dir.path("big")); }, {dir.path("big"), "truncated"});
}

TEST(Idx, TruncatedGzipNamesCompressedOffset) {
  ScratchDir dir;
  Bytes gz = gzip_stored(TinyIdx().images);
  gz.resize(gz.size() - 20);  // cut inside the stored block
  write_bytes(dir.path("cut.gz"), gz);
  expect_error<IoError>([&] { data::read_idx(dir.path("cut.gz")); },
                        {dir.path("cut.gz"), "truncated gzip", fmt::format("byte {}", gz.size())});
  // A complete gzip stream whose IDX payload is short: the offset is in the
  // decompressed data.
  Bytes inner = TinyIdx().images;
  inner.resize(20);
  write_bytes(dir.path("short.gz"), gzip_stored(inner));
  expect_error<IoError>([&] { data::read_idx(dir.path("short.gz")); },
                        {dir.path("short.gz"), "byte offset 20 of the decompressed data"});
}

TEST(Idx, CorruptGzipIsAnIoError) {
  ScratchDir dir;
  Bytes gz = gzip_stored(TinyIdx().images);
  gz[gz.size() - 6] ^= 0xFF;  // the CRC-32
  write_bytes(dir.path("crc.gz"), gz);
  expect_error<IoError>([&] { data::read_idx(dir.path("crc.gz")); },
                        {dir.path("crc.gz"), "corrupt gzip"});
}

TEST(Idx, LabelOutOfRangeNamesFileAndOffset) {
  ScratchDir dir;
  TinyIdx t;
  write_bytes(dir.path("img"), t.images);
  write_bytes(dir.path("lab"), idx_bytes({3}, {1, 2, 10}));
  expect_error<IoError>([&] { MnistDataset(dir.path("img"), dir.path("lab")); },
                        {dir.path("lab"), "label 10", "byte offset 10", "[0, 10)"});
  // The same labels are fine with more classes.
  EXPECT_EQ(MnistDataset(dir.path("img"), dir.path("lab"), 11).label(2), 10);
  write_bytes(dir.path("lab.gz"), gzip_stored(idx_bytes({3}, {1, 12, 0})));
  expect_error<IoError>([&] { MnistDataset(dir.path("img"), dir.path("lab.gz")); },
                        {"label 12", "byte offset 9 of the decompressed data"});
}

TEST(Idx, MismatchedOrMisshapenFilesAreRejected) {
  ScratchDir dir;
  TinyIdx t;
  write_bytes(dir.path("img"), t.images);
  write_bytes(dir.path("lab4"), idx_bytes({4}, {1, 2, 3, 4}));
  expect_error<IoError>([&] { MnistDataset(dir.path("img"), dir.path("lab4")); },
                        {"4 labels", "3 images"});
  // Swapped arguments: labels where images belong.
  expect_error<IoError>([&] { MnistDataset(dir.path("lab4"), dir.path("img")); }, {"rank 3"});
  EXPECT_THROW(MnistDataset(dir.path("img"), dir.path("lab4"), 0), ValueError);
}

TEST(Idx, IndexOutOfRangeIsAnIndexError) {
  ScratchDir dir;
  TinyIdx t;
  write_bytes(dir.path("img"), t.images);
  write_bytes(dir.path("lab"), t.labels);
  MnistDataset d(dir.path("img"), dir.path("lab"));
  EXPECT_THROW(d.get(3), IndexError);
  EXPECT_THROW(d.get(-1), IndexError);
  EXPECT_THROW(d.label(3), IndexError);
}

}  // namespace
}  // namespace ddp::test
