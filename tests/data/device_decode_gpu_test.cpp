// DeviceDecodeLoader on a GPU against the CPU pipeline: the same indices,
// labels and crops, JPEG pixels within the bound below, the images decoded
// on the CPU (PNG, greyscale, CMYK) equal, and the output dtypes and layouts
// exact against each other. Skips without a GPU, without nvJPEG in the
// build, or without libnvjpeg (the reason is printed).
//
// The bound: nvJPEG's inverse DCT and chroma upsampling are not
// libjpeg-turbo's (islow IDCT, fancy, i.e. triangle-filtered, upsampling of
// 4:2:0 chroma), so decoded pixels differ by a level or two in places and by
// more at sharp colour edges of 4:2:0 images. The crops are then resized with
// the CPU's own tables and arithmetic: shrinking averages the differences,
// enlarging (a small crop of a small image) spreads them. Asserted on u8
// outputs of 48 x 48 crops, per image: mean |difference| <= 3 levels over
// its values and at most 64 on any one. Measured on an H200 with nvJPEG
// 13.0.4 (2026-11-27): the golden photographs (downscaled crops) at most
// 0.47 mean and 6 max; the packed 120-pixel re-encodes (4:2:0, mostly
// enlarged crops) at most 1.94 mean and 35 max. A wrong crop box, flip,
// channel order or row gives means of tens of levels on these photographs,
// so the mean is what catches a broken pipeline; the maximum only catches
// garbage. Both are printed for every image.
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>

#include "data/data_test_util.h"
#include "ddp/core/half.h"
#include "ddp/data/data_loader.h"
#include "ddp/data/device_decode.h"
#include "ddp/data/packed_images.h"
#include "ddp/tensor/cuda.h"

namespace ddp::test {
namespace {

namespace fs = std::filesystem;
using data::ImageTransform;

const std::string kImages = std::string(DDP_TEST_DATA_DIR) + "/golden/images/";

#define REQUIRE_DEVICE_DECODE()                                                        \
  if (const std::string why = data::device_decode_unavailable_reason(0); !why.empty()) \
  GTEST_SKIP() << why

// Two classes of the golden photographs, every kind the CPU decodes.
fs::path make_folder(const ScratchDir& dir) {
  const fs::path root = dir.dir() / "folder";
  const std::vector<std::pair<std::string, std::string>> files = {
      {"a/0.jpg", "rgb420_q75.jpg"},  {"a/1.jpg", "gray.jpg"},       {"a/2.png", "rgb.png"},
      {"a/3.jpg", "cmyk.jpg"},        {"a/4.jpg", "rgb444_q95.jpg"}, {"b/0.jpg", "rgb444_q95.jpg"},
      {"b/1.jpg", "progressive.jpg"}, {"b/2.png", "palette.png"},    {"b/3.jpg", "rgb420_q75.jpg"},
      {"b/4.png", "rgba.png"}};
  for (const auto& [to, from] : files) {
    fs::create_directories((root / to).parent_path());
    write_bytes((root / to).string(), read_bytes(kImages + from));
  }
  return root;
}

// Images the device path hands to the CPU pipeline (exact there).
bool decoded_on_cpu(const std::string& path) {
  return path.ends_with(".png") || path.ends_with("/a/1.jpg") || path.ends_with("/a/3.jpg");
}

ImageTransform u8_transform(bool train) {
  ImageTransform t =
      train ? ImageTransform::imagenet_train(48) : ImageTransform::imagenet_eval(48, 56);
  t.dtype = DType::u8;
  t.layout = data::ImageLayout::hwc;
  t.dct_scaling = false;  // the device decodes at full size
  return t;
}

void compare_with_cpu(const std::shared_ptr<const data::EncodedImageDataset>& ds,
                      const std::function<std::string(int64_t)>& path_of, const char* what,
                      int64_t cpu_per_epoch) {
  const int64_t n = ds->size();
  const size_t row = size_t(ds->spec().input_bytes());
  for (int workers : {0, 2}) {
    auto s1 = std::make_shared<data::RandomSampler>(n, 7);
    auto s2 = std::make_shared<data::RandomSampler>(n, 7);
    data::DataLoader cpu(ds, {.batch_size = 4, .num_workers = workers, .seed = 11}, s1);
    data::DeviceDecodeLoader gpu(
        ds, {.batch_size = 4, .num_workers = workers, .seed = 11, .device = Device::cuda(0)}, s2);
    std::cout << gpu.describe() << "\n";
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      cpu.set_epoch(epoch);
      gpu.set_epoch(epoch);
      std::vector<data::Batch> want;
      for (const data::Batch& b : cpu) want.push_back(b);
      size_t k = 0;
      for (const data::Batch& b : gpu) {
        ASSERT_LT(k, want.size());
        ASSERT_TRUE(b.input.is_cuda());
        ASSERT_EQ(b.indices, want[k].indices);
        EXPECT_EQ(b.input.shape(), want[k].input.shape());
        EXPECT_EQ(values_of<int64_t>(b.target.cpu()), values_of<int64_t>(want[k].target));
        const Tensor got = b.input.cpu();
        const auto* g = static_cast<const uint8_t*>(got.data_ptr());
        const auto* w = static_cast<const uint8_t*>(want[k].input.data_ptr());
        for (int64_t r = 0; r < b.size(); ++r) {
          const std::string path = path_of(b.indices[size_t(r)]);
          int max = 0;
          double sum = 0;
          for (size_t i = 0; i < row; ++i) {
            const int d = std::abs(int(g[size_t(r) * row + i]) - int(w[size_t(r) * row + i]));
            max = std::max(max, d);
            sum += d;
          }
          const double mean = sum / double(row);
          std::cout << what << " workers " << workers << " epoch " << epoch << " " << path
                    << ": mean |diff| " << mean << ", max " << max << "\n";
          if (decoded_on_cpu(path)) {
            EXPECT_EQ(max, 0) << path;
          } else {
            EXPECT_LE(mean, 3.0) << path;
            EXPECT_LE(max, 64) << path;
          }
        }
        ++k;
      }
      EXPECT_EQ(k, want.size());
    }
    std::cout << what << ": " << gpu.cpu_decoded() << " images decoded on the CPU\n";
    EXPECT_GE(gpu.cpu_decoded(), 2 * cpu_per_epoch);
  }
}

TEST(DeviceDecodeGpu, ImageFolderCropsMatchTheCpuPipeline) {
  REQUIRE_DEVICE_DECODE();
  ScratchDir dir;
  const fs::path root = make_folder(dir);
  for (bool train : {true, false}) {
    auto ds = std::make_shared<data::ImageFolderDataset>(root.string(), u8_transform(train));
    compare_with_cpu(
        ds, [&](int64_t i) { return ds->samples()[size_t(i)].path; }, train ? "train" : "eval",
        /*cpu_per_epoch=*/5);  // 3 PNGs, grey, CMYK
  }
}

TEST(DeviceDecodeGpu, PackedImagesMatchTheCpuPipeline) {
  REQUIRE_DEVICE_DECODE();
  ScratchDir dir;
  const fs::path root = make_folder(dir);
  const std::string out = (dir.dir() / "packed").string();
  // Re-encoded as baseline 4:2:0 JPEGs: every record decodes on the GPU.
  data::pack_image_folder(root.string(), out, {.shards = 2, .max_side = 120, .quality = 90});
  auto ds = std::make_shared<data::PackedImageDataset>(out, u8_transform(true));
  compare_with_cpu(
      ds, [](int64_t i) { return "record " + std::to_string(i); }, "packed", 0);
}

// f32 NCHW and bf16 NHWC outputs are the u8 output through the CPU's
// normalisation, exactly: the layouts, the table and the bf16 rounding.
TEST(DeviceDecodeGpu, DtypesAndLayoutsAreExact) {
  REQUIRE_DEVICE_DECODE();
  ScratchDir dir;
  const fs::path root = make_folder(dir);
  auto load = [&](DType dtype, data::ImageLayout layout) {
    ImageTransform t = u8_transform(true);
    t.dtype = dtype;
    t.layout = layout;
    auto ds = std::make_shared<data::ImageFolderDataset>(root.string(), t);
    data::DeviceDecodeLoader gpu(ds, {.batch_size = 10, .seed = 3, .device = Device::cuda(0)});
    gpu.start();
    std::optional<data::Batch> b = gpu.next();
    EXPECT_TRUE(b.has_value());
    return b->input.cpu();
  };
  const Tensor u8 = load(DType::u8, data::ImageLayout::hwc);
  const Tensor f32 = load(DType::f32, data::ImageLayout::chw);
  const Tensor bf16 = load(DType::bf16, data::ImageLayout::hwc);
  const ImageTransform t = u8_transform(true);
  const int64_t n = t.size, batch = u8.shape()[0];
  const auto* p = static_cast<const uint8_t*>(u8.data_ptr());
  const auto* f = static_cast<const float*>(f32.data_ptr());
  const auto* h = static_cast<const BFloat16*>(bf16.data_ptr());
  int64_t bad = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t y = 0; y < n; ++y)
      for (int64_t x = 0; x < n; ++x)
        for (int64_t c = 0; c < 3; ++c) {
          const int64_t hwc = ((b * n + y) * n + x) * 3 + c, chw = ((b * 3 + c) * n + y) * n + x;
          const float want = (float(p[hwc]) / 255.0f - t.mean[size_t(c)]) / t.std[size_t(c)];
          if (f[chw] != want || float(h[hwc]) != float(BFloat16(want))) ++bad;
        }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace ddp::test
