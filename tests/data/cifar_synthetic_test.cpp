// CIFAR-10 binary files written by the test, and the synthetic image dataset.
#include <cmath>
#include <filesystem>
#include <set>

#include "data/data_test_util.h"
#include "ddp/data/vision.h"

namespace ddp::test {
namespace {

using data::Cifar10Dataset;
using data::Split;

// n records; record r has label labels[r] and pixel p = (r * 7 + p) % 256.
Bytes cifar_records(const std::vector<uint8_t>& labels, int label_bytes = 1) {
  Bytes b;
  for (size_t r = 0; r < labels.size(); ++r) {
    for (int k = 0; k + 1 < label_bytes; ++k) b.push_back(0);  // CIFAR-100 coarse label
    b.push_back(labels[r]);
    for (int p = 0; p < 3072; ++p) b.push_back(uint8_t((r * 7 + size_t(p)) % 256));
  }
  return b;
}

TEST(Cifar10, ReadsTrainAndTestSplitsFromRoot) {
  ScratchDir dir;
  for (int i = 1; i <= 5; ++i)
    write_bytes(dir.path(fmt::format("data_batch_{}.bin", i)), cifar_records({uint8_t(i), 0}));
  write_bytes(dir.path("test_batch.bin"), cifar_records({3, 4, 5}));
  Cifar10Dataset train(dir.dir().string(), Split::train), test(dir.dir().string(), Split::test);
  ASSERT_EQ(train.size(), 10);
  ASSERT_EQ(test.size(), 3);
  EXPECT_EQ(train.spec().input_shape, (Shape{3, 32, 32}));
  // Files are concatenated in order: batch i holds labels {i, 0}.
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(train.label(2 * (i - 1)), i);
    EXPECT_EQ(train.label(2 * (i - 1) + 1), 0);
  }
  data::Example e = test.get(1);
  EXPECT_EQ(e.target.item<int64_t>(), 4);
  std::vector<float> x = values_of<float>(e.input);
  ASSERT_EQ(x.size(), 3072u);
  // Channel-major: element (c, y, x) is byte c * 1024 + y * 32 + x of the record's image.
  for (int c = 0; c < 3; ++c)
    for (int p : {0, 33, 1023}) {
      const int byte = c * 1024 + p;
      EXPECT_EQ(x[size_t(byte)], float((7 + byte) % 256) / 255.0f) << c << " " << p;
    }
}

TEST(Cifar10, AcceptsTheArchiveSubfolderAndCifar100Layout) {
  ScratchDir dir;
  std::filesystem::create_directories(dir.path("cifar-10-batches-bin"));
  write_bytes(dir.path("cifar-10-batches-bin/test_batch.bin"), cifar_records({9}));
  EXPECT_EQ(Cifar10Dataset(dir.dir().string(), Split::test).label(0), 9);

  write_bytes(dir.path("train.bin"), cifar_records({42, 99}, /*label_bytes=*/2));
  Cifar10Dataset c100({dir.path("train.bin")}, 100, 2);
  EXPECT_EQ(c100.size(), 2);
  EXPECT_EQ(c100.label(0), 42);
  EXPECT_EQ(c100.label(1), 99);
  EXPECT_EQ(values_of<float>(c100.get(1).input)[0], 7.0f / 255.0f);
}

TEST(Cifar10, MissingFileNamesIt) {
  ScratchDir dir;
  write_bytes(dir.path("data_batch_1.bin"), cifar_records({1}));
  expect_error<IoError>([&] { Cifar10Dataset(dir.dir().string(), Split::train); },
                        {"data_batch_2.bin"});
}

TEST(Cifar10, TruncatedFileNamesOffsetOfPartialRecord) {
  ScratchDir dir;
  Bytes b = cifar_records({1, 2, 3});
  b.resize(b.size() - 100);
  write_bytes(dir.path("test_batch.bin"), b);
  expect_error<IoError>(
      [&] { Cifar10Dataset(dir.dir().string(), Split::test); },
      {dir.path("test_batch.bin"), "truncated", "byte offset 6146", "2973 bytes"});
  write_bytes(dir.path("empty.bin"), {});
  expect_error<IoError>([&] { Cifar10Dataset({dir.path("empty.bin")}); }, {"empty.bin", "empty"});
}

TEST(Cifar10, LabelOutOfRangeNamesFileAndOffset) {
  ScratchDir dir;
  write_bytes(dir.path("b.bin"), cifar_records({1, 10}));
  expect_error<IoError>([&] { Cifar10Dataset({dir.path("b.bin")}); },
                        {dir.path("b.bin"), "label 10", "record 1", "byte offset 3073", "[0, 10)"});
  EXPECT_THROW(Cifar10Dataset({dir.path("b.bin")}, 10, 3), ValueError);
  EXPECT_THROW(Cifar10Dataset(std::vector<std::string>{}), ValueError);
}

TEST(SyntheticImages, DeterministicInRangeAndSeedDependent) {
  data::SyntheticImageDataset a(100, {3, 8, 8}, 7, 1), b(100, {3, 8, 8}, 7, 1),
      c(100, {3, 8, 8}, 7, 2);
  EXPECT_EQ(a.size(), 100);
  EXPECT_EQ(a.spec().input_shape, (Shape{3, 8, 8}));
  std::set<int64_t> labels;
  int same_as_other_seed = 0;
  for (int64_t i = 0; i < 100; ++i) {
    std::vector<float> xa = values_of<float>(a.get(i).input);
    EXPECT_EQ(xa, values_of<float>(b.get(i).input)) << i;
    if (xa == values_of<float>(c.get(i).input)) ++same_as_other_seed;
    for (float v : xa) {
      // One of the 256 levels k / 255.
      const float k = std::round(v * 255.0f);
      ASSERT_TRUE(k >= 0.0f && k <= 255.0f) << v;
      ASSERT_EQ(v, k / 255.0f);
    }
    const int64_t l = a.get(i).target.item<int64_t>();
    EXPECT_EQ(l, a.label(i));
    EXPECT_EQ(l, b.label(i));
    labels.insert(l);
  }
  EXPECT_EQ(same_as_other_seed, 0);
  EXPECT_EQ(labels.size(), 7u);  // 100 draws hit all 7 classes
  EXPECT_GE(*labels.begin(), 0);
  EXPECT_LT(*labels.rbegin(), 7);
  // Different examples differ, and the values look uniform.
  std::vector<float> x0 = values_of<float>(a.get(0).input), x1 = values_of<float>(a.get(1).input);
  EXPECT_NE(x0, x1);
  double mean = 0;
  for (float v : x0) mean += v;
  EXPECT_NEAR(mean / double(x0.size()), 0.5, 0.1);
}

TEST(SyntheticImages, ImageNetShapeByDefaultAndBadArguments) {
  data::SyntheticImageDataset d(2);
  EXPECT_EQ(d.spec().input_shape, (Shape{3, 224, 224}));
  EXPECT_LT(d.label(1), 1000);
  EXPECT_THROW(data::SyntheticImageDataset(-1), ValueError);
  EXPECT_THROW(data::SyntheticImageDataset(4, {3, 0, 2}), ShapeError);
  EXPECT_THROW(data::SyntheticImageDataset(4, {3, 2, 2}, 0), ValueError);
  EXPECT_THROW(d.get(2), IndexError);
}

}  // namespace
}  // namespace ddp::test
