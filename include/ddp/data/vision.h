#pragma once
// Image datasets: MNIST-style IDX files (MNIST, Fashion-MNIST), the CIFAR-10
// binary format, and synthetic images for benchmarks. Images come out as f32
// [C, H, W] scaled to [0, 1] (torchvision's ToTensor), targets as i64 class
// indices; the transforms of transforms.h then run in the loader's workers.
//
// Every file is validated when the dataset is built: a missing file, a wrong
// magic number, a truncated file or a label out of range raises IoError
// naming the file and the byte offset (for .gz files, the offset in the
// decompressed stream), so a bad download fails before the first step.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/data/dataset.h"

namespace ddp::data {

// ---- IDX ------------------------------------------------------------------
// An IDX file (LeCun's MNIST format): magic 00 00 <type> <ndim>, ndim
// big-endian u32 sizes, then the elements row-major. Only type 0x08 (u8)
// exists in the MNIST family and only it is accepted.
struct IdxArray {
  std::string path;
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // prod(dims) bytes
  bool gzip = false;          // the file was gzip-compressed
};
// Reads a raw or gzip-compressed (by content, not by name) IDX file.
// IoError: missing/unreadable, wrong magic or type, fewer bytes than the
// dimensions promise, trailing bytes, or a .gz file in a build without zlib.
IdxArray read_idx(const std::string& path);

// Images (u8 [N, H, W]) and labels (u8 [N]) from a pair of IDX files.
class MnistDataset final : public Dataset {
 public:
  // The standard file names in `root`, raw or with .gz:
  // train-images-idx3-ubyte / train-labels-idx1-ubyte for Split::train,
  // t10k-images-idx3-ubyte / t10k-labels-idx1-ubyte for Split::test.
  MnistDataset(const std::string& root, Split split, int64_t num_classes = 10);
  // Explicit files. Labels must lie in [0, num_classes).
  MnistDataset(const std::string& images_path, const std::string& labels_path,
               int64_t num_classes = 10);

  int64_t size() const override { return n_; }
  std::string describe() const override;
  // The label of example i without decoding its image.
  int64_t label(int64_t index) const;

 private:
  void do_read(int64_t index, void* input, void* target) const override;
  void load(const std::string& images_path, const std::string& labels_path, int64_t num_classes);
  std::string images_path_;
  int64_t n_ = 0, h_ = 0, w_ = 0;
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
};

// ---- CIFAR-10 -------------------------------------------------------------
// The binary version: records of 1 label byte and 3072 pixel bytes (1024 red,
// then green, then blue, each 32x32 row-major); data_batch_1.bin ..
// data_batch_5.bin for training and test_batch.bin for testing. The same
// layout with num_classes = 100 and label_bytes = 2 reads CIFAR-100
// (coarse label byte, then fine label byte; the fine one is used).
class Cifar10Dataset final : public Dataset {
 public:
  Cifar10Dataset(const std::string& root, Split split, int64_t num_classes = 10);
  explicit Cifar10Dataset(std::vector<std::string> files, int64_t num_classes = 10,
                          int label_bytes = 1);

  static constexpr int64_t kImageBytes = 3 * 32 * 32;

  int64_t size() const override { return int64_t(labels_.size()); }
  std::string describe() const override;
  int64_t label(int64_t index) const;
  const std::vector<std::string>& files() const { return files_; }

 private:
  void do_read(int64_t index, void* input, void* target) const override;
  std::vector<std::string> files_;
  std::vector<uint8_t> pixels_;  // kImageBytes per example
  std::vector<uint8_t> labels_;
};

// ---- synthetic --------------------------------------------------------------
// Images of any shape with pixels uniform over the 256 levels k / 255 (like a
// decoded 8-bit image) and labels uniform in [0, num_classes), both a pure
// function of (seed, index): cheap (thousands of 224x224 images per second
// per thread), no storage, identical on every rank and run. For benchmarks
// (ImageNet-shaped by default) and smoke tests.
class SyntheticImageDataset final : public Dataset {
 public:
  explicit SyntheticImageDataset(int64_t size, Shape image_shape = {3, 224, 224},
                                 int64_t num_classes = 1000, uint64_t seed = 0);
  int64_t size() const override { return size_; }
  std::string describe() const override;
  int64_t label(int64_t index) const;

 private:
  void do_read(int64_t index, void* input, void* target) const override;
  int64_t size_, num_classes_;
  uint64_t seed_;
};

}  // namespace ddp::data
