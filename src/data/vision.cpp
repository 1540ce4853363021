// IDX, CIFAR-10 and synthetic image datasets (vision.h).

#include "ddp/data/vision.h"

#include <algorithm>
#include <filesystem>

#include "data/data_util.h"

namespace ddp::data {

namespace fs = std::filesystem;

namespace {

// "byte offset 12" or, for a .gz file, "byte offset 12 of the decompressed data".
std::string where(int64_t offset, bool gz) {
  return gz ? fmt::format("byte offset {} of the decompressed data", offset)
            : fmt::format("byte offset {}", offset);
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// root/name, or root/name.gz when only that exists.
std::string find_file(const std::string& root, const std::string& name) {
  const fs::path plain = fs::path(root) / name;
  std::error_code ec;
  if (fs::exists(plain, ec)) return plain.string();
  const fs::path gz = fs::path(root) / (name + ".gz");
  if (fs::exists(gz, ec)) return gz.string();
  DDP_THROW(IoError, "neither '{}' nor '{}' exists", plain.string(), gz.string());
}

void write_label(void* target, int64_t label) { *static_cast<int64_t*>(target) = label; }

}  // namespace

// ---- IDX --------------------------------------------------------------------

IdxArray read_idx(const std::string& path) {
  IdxArray a;
  a.path = path;
  a.data = detail::read_file(path, &a.gzip);
  const bool gz = a.gzip;
  const std::vector<uint8_t>& b = a.data;
  if (b.size() < 4)
    DDP_THROW(IoError, "'{}' is truncated: it ends at {}, inside the 4-byte IDX header", path,
              where(int64_t(b.size()), gz));
  if (b[0] != 0 || b[1] != 0)
    DDP_THROW(IoError,
              "'{}' is not an IDX file: wrong magic number 0x{:02x}{:02x}{:02x}{:02x} at {} "
              "(expected 0x0000 followed by the type and rank bytes)",
              path, b[0], b[1], b[2], b[3], where(0, gz));
  if (b[2] != 0x08)
    DDP_THROW(IoError,
              "'{}': unsupported IDX element type 0x{:02x} at {} (only 0x08, unsigned byte, is "
              "supported)",
              path, b[2], where(2, gz));
  const int ndim = b[3];
  if (ndim == 0) DDP_THROW(IoError, "'{}': IDX rank 0 at {}", path, where(3, gz));
  const int64_t header = 4 + 4 * int64_t(ndim);
  if (int64_t(b.size()) < header)
    DDP_THROW(IoError,
              "'{}' is truncated: the header of a rank-{} IDX file needs {} bytes, the "
              "data ends at {}",
              path, ndim, header, where(int64_t(b.size()), gz));
  // Checked before each product: dimensions up to 2^32 - 1 would overflow
  // int64 after a few (and could wrap round to a small count that matches a
  // short file; found by tests/fuzz/idx_fuzz.cpp).
  constexpr int64_t kMaxElements = int64_t(1) << 40;
  int64_t numel = 1;
  for (int d = 0; d < ndim; ++d) {
    a.dims.push_back(int64_t(big_endian_u32(b.data() + 4 + 4 * d)));
    if (a.dims.back() != 0 && numel > kMaxElements / a.dims.back())
      DDP_THROW(IoError, "'{}': implausible IDX dimensions {} at {}", path, a.dims, where(4, gz));
    numel *= a.dims.back();
  }
  const int64_t end = header + numel;
  if (int64_t(b.size()) < end)
    DDP_THROW(IoError,
              "'{}' is truncated: dimensions {} need data up to byte {}, but the data ends at {}",
              path, a.dims, end, where(int64_t(b.size()), gz));
  if (int64_t(b.size()) > end)
    DDP_THROW(IoError, "'{}': {} unexpected bytes after the IDX data, starting at {}", path,
              int64_t(b.size()) - end, where(end, gz));
  a.data.erase(a.data.begin(), a.data.begin() + header);
  return a;
}

MnistDataset::MnistDataset(const std::string& root, Split split, int64_t num_classes)
    : Dataset(ExampleSpec{}) {
  // Looked up one after the other, so a missing images file is reported first.
  const bool train = split == Split::train;
  std::string images =
      find_file(root, train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte");
  std::string labels =
      find_file(root, train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte");
  load(images, labels, num_classes);
}

MnistDataset::MnistDataset(const std::string& images_path, const std::string& labels_path,
                           int64_t num_classes)
    : Dataset(ExampleSpec{}) {
  load(images_path, labels_path, num_classes);
}

void MnistDataset::load(const std::string& images_path, const std::string& labels_path,
                        int64_t num_classes) {
  images_path_ = images_path;
  DDP_CHECK(num_classes >= 1 && num_classes <= 256,
            "MnistDataset: num_classes {} is not in [1, 256]", num_classes);
  IdxArray images = read_idx(images_path);
  if (images.dims.size() != 3)
    DDP_THROW(IoError, "'{}': expected images of rank 3 [N, H, W], got IDX dimensions {}",
              images_path, images.dims);
  IdxArray labels = read_idx(labels_path);
  if (labels.dims.size() != 1)
    DDP_THROW(IoError, "'{}': expected labels of rank 1 [N], got IDX dimensions {}", labels_path,
              labels.dims);
  if (labels.dims[0] != images.dims[0])
    DDP_THROW(IoError, "'{}' holds {} labels but '{}' holds {} images", labels_path, labels.dims[0],
              images_path, images.dims[0]);
  constexpr int64_t kLabelHeader = 8;  // magic + one dimension
  for (size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] >= num_classes)
      DDP_THROW(IoError, "'{}': label {} of example {} at {} is out of range [0, {})", labels_path,
                labels.data[i], i, where(kLabelHeader + int64_t(i), labels.gzip), num_classes);
  n_ = images.dims[0];
  h_ = images.dims[1];
  w_ = images.dims[2];
  pixels_ = std::move(images.data);
  labels_ = std::move(labels.data);
  set_spec(ExampleSpec{{1, h_, w_}, DType::f32, true, {}, DType::i64});
}

std::string MnistDataset::describe() const { return fmt::format("MnistDataset({})", images_path_); }

int64_t MnistDataset::label(int64_t index) const {
  DDP_CHECK_T(IndexError, index >= 0 && index < n_, "{}: index {} out of range [0, {})", describe(),
              index, n_);
  return labels_[size_t(index)];
}

void MnistDataset::do_read(int64_t index, void* input, void* target) const {
  const int64_t px = h_ * w_;
  detail::u8_to_unit_float(pixels_.data() + index * px, static_cast<float*>(input), px);
  write_label(target, labels_[size_t(index)]);
}

// ---- CIFAR-10 ---------------------------------------------------------------

static std::vector<std::string> cifar_files(const std::string& root, Split split) {
  // torchvision's archive unpacks into cifar-10-batches-bin/; accept either.
  fs::path dir = root;
  std::error_code ec;
  if (fs::is_directory(dir / "cifar-10-batches-bin", ec)) dir /= "cifar-10-batches-bin";
  std::vector<std::string> files;
  if (split == Split::train) {
    for (int i = 1; i <= 5; ++i)
      files.push_back((dir / fmt::format("data_batch_{}.bin", i)).string());
  } else {
    files.push_back((dir / "test_batch.bin").string());
  }
  return files;
}

Cifar10Dataset::Cifar10Dataset(const std::string& root, Split split, int64_t num_classes)
    : Cifar10Dataset(cifar_files(root, split), num_classes) {}

Cifar10Dataset::Cifar10Dataset(std::vector<std::string> files, int64_t num_classes, int label_bytes)
    : Dataset(ExampleSpec{{3, 32, 32}, DType::f32, true, {}, DType::i64}),
      files_(std::move(files)) {
  DDP_CHECK(!files_.empty(), "Cifar10Dataset: no files given");
  DDP_CHECK(num_classes >= 1 && num_classes <= 256,
            "Cifar10Dataset: num_classes {} is not in [1, 256]", num_classes);
  DDP_CHECK(label_bytes >= 1 && label_bytes <= 2, "Cifar10Dataset: label_bytes {} is not 1 or 2",
            label_bytes);
  const int64_t rec = label_bytes + kImageBytes;
  for (const std::string& path : files_) {
    bool gz = false;
    std::vector<uint8_t> b = detail::read_file(path, &gz);
    const auto size = int64_t(b.size());
    if (size == 0) DDP_THROW(IoError, "'{}' is empty: expected {}-byte CIFAR records", path, rec);
    if (size % rec != 0)
      DDP_THROW(IoError,
                "'{}' is truncated: {} bytes is not a whole number of {}-byte CIFAR records; the "
                "last record starts at {} and has only {} bytes",
                path, size, rec, where(size / rec * rec, gz), size % rec);
    const int64_t n = size / rec;
    const size_t base = labels_.size();
    labels_.resize(base + size_t(n));
    pixels_.resize(pixels_.size() + size_t(n * kImageBytes));
    uint8_t* px = pixels_.data() + base * size_t(kImageBytes);
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* p = b.data() + r * rec;
      const uint8_t label = p[label_bytes - 1];  // CIFAR-100: the fine label
      if (label >= num_classes)
        DDP_THROW(IoError, "'{}': label {} of record {} at {} is out of range [0, {})", path, label,
                  r, where(r * rec + label_bytes - 1, gz), num_classes);
      labels_[base + size_t(r)] = label;
      std::copy(p + label_bytes, p + rec, px + r * kImageBytes);
    }
  }
}

std::string Cifar10Dataset::describe() const {
  return files_.size() == 1
             ? fmt::format("Cifar10Dataset({})", files_[0])
             : fmt::format("Cifar10Dataset({} .. {})", files_.front(), files_.back());
}

int64_t Cifar10Dataset::label(int64_t index) const {
  DDP_CHECK_T(IndexError, index >= 0 && index < size(), "{}: index {} out of range [0, {})",
              describe(), index, size());
  return labels_[size_t(index)];
}

void Cifar10Dataset::do_read(int64_t index, void* input, void* target) const {
  detail::u8_to_unit_float(pixels_.data() + index * kImageBytes, static_cast<float*>(input),
                           kImageBytes);
  write_label(target, labels_[size_t(index)]);
}

// ---- synthetic --------------------------------------------------------------

// Images and labels use different keys so that changing the image shape keeps
// the labels.
static constexpr uint64_t kImageStream = 0x1A4E5ull, kLabelStream = 0x1ABE1ull;

SyntheticImageDataset::SyntheticImageDataset(int64_t size, Shape image_shape, int64_t num_classes,
                                             uint64_t seed)
    : Dataset(ExampleSpec{std::move(image_shape), DType::f32, true, {}, DType::i64}),
      size_(size),
      num_classes_(num_classes),
      seed_(seed) {
  DDP_CHECK(size >= 0, "SyntheticImageDataset: size {} < 0", size);
  DDP_CHECK(num_classes >= 1, "SyntheticImageDataset: num_classes {} < 1", num_classes);
  for (int64_t d : spec().input_shape)
    DDP_CHECK_T(ShapeError, d >= 1, "SyntheticImageDataset: bad image shape {}",
                shape_str(spec().input_shape));
}

std::string SyntheticImageDataset::describe() const {
  return fmt::format("SyntheticImageDataset({} x {}, {} classes, seed {})", size_,
                     shape_str(spec().input_shape), num_classes_, seed_);
}

int64_t SyntheticImageDataset::label(int64_t index) const {
  DDP_CHECK_T(IndexError, index >= 0 && index < size_, "{}: index {} out of range [0, {})",
              describe(), index, size_);
  const detail::Words w = detail::philox(detail::mix_key(seed_ ^ kLabelStream, uint64_t(index)), 0);
  return int64_t(detail::below((uint64_t(w.w[0]) << 32) | w.w[1], uint64_t(num_classes_)));
}

void SyntheticImageDataset::do_read(int64_t index, void* input, void* target) const {
  // Pixels are 8-bit levels k / 255 like a decoded image, eight per 64-bit
  // word of a SplitMix64 sequence started from (seed, index): about 30x
  // cheaper than a Philox draw per float, which would cap a loader thread at
  // a few hundred ImageNet-sized images per second.
  const uint64_t key = detail::mix_key(seed_ ^ kImageStream, uint64_t(index));
  const std::array<float, 256>& level = detail::unit_float_table();
  auto* out = static_cast<float*>(input);
  const int64_t n = shape_numel(spec().input_shape);
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t w = detail::mix64(key + uint64_t(i / 8) * 0x9E3779B97F4A7C15ull);
    for (int64_t j = i; j < std::min(i + 8, n); ++j, w >>= 8) out[j] = level[w & 0xFF];
  }
  write_label(target, label(index));
}

}  // namespace ddp::data
