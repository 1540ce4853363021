// Image decoding with the ImageNet transforms against torchvision 0.14 (PIL)
// golden pixels, the DCT-scaled decode's measured difference, the output
// dtypes and layouts, ImageFolder's class and file listing and its errors,
// bad images (raise and skip), and identical batches for any worker count.
#include "ddp/data/image_folder.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <tuple>

#include "data/data_test_util.h"
#include "ddp/data/data_loader.h"
#include "golden_file.h"

namespace ddp::test {
namespace {

namespace fs = std::filesystem;
using data::CropPlan;
using data::ImageTransform;

const std::string kImages = std::string(DDP_TEST_DATA_DIR) + "/golden/images/";
const std::vector<std::string> kFiles = {"rgb420_q75.jpg", "rgb444_q95.jpg", "gray.jpg",
                                         "cmyk.jpg",       "progressive.jpg", "rgb.png",
                                         "rgba.png",       "palette.png"};

Bytes image_bytes(const std::string& name) {
  Bytes b = read_bytes(kImages + name);
  EXPECT_FALSE(b.empty()) << kImages + name;
  return b;
}

// u8 HWC pixels as torchvision's np.asarray(PIL image).
ImageTransform pixels_transform(bool train, int64_t size, int64_t resize = 0) {
  ImageTransform t = train ? ImageTransform::imagenet_train(size)
                           : ImageTransform::imagenet_eval(size, resize);
  t.dtype = DType::u8;
  t.layout = data::ImageLayout::hwc;
  t.dct_scaling = false;
  return t;
}

std::vector<uint8_t> transform_with(const Bytes& b, const std::string& name,
                                    const ImageTransform& t, const CropPlan& plan, int scale) {
  std::vector<uint8_t> out(size_t(t.size * t.size * 3));
  data::decode_with_plan(b, name, t, plan, out.data(), scale);
  return out;
}

struct Diff {
  int max = 0;
  double sum = 0;
  int64_t n = 0;
  void add(const std::vector<uint8_t>& a, const Tensor& golden) {
    const auto* g = static_cast<const uint8_t*>(golden.data_ptr());
    EXPECT_EQ(int64_t(a.size()), golden.numel());
    for (size_t i = 0; i < a.size(); ++i) {
      const int d = std::abs(int(a[i]) - int(g[i]));
      max = std::max(max, d);
      sum += d;
    }
    n += int64_t(a.size());
  }
  double mean() const { return n ? sum / double(n) : 0.0; }
};

struct GoldenCase {
  std::string file, key;
  CropPlan plan;
  ImageTransform transform;
};

// Every golden case: the training crops with torchvision's boxes and flips,
// the evaluation crops with the geometry libddp computes.
std::vector<GoldenCase> golden_cases() {
  const nn::TensorDict& g = golden_file("image_transforms");
  std::vector<GoldenCase> cases;
  for (const std::string& f : kFiles) {
    const Bytes b = image_bytes(f);
    const data::ImageDims dims = data::image_dims(b, f);
    for (int k = 0; k < 4; ++k) {
      const std::string key = f + "/train" + std::to_string(k);
      if (!g.contains(key + "/plan")) continue;
      const auto* p = static_cast<const int64_t*>(g.at(key + "/plan").data_ptr());
      const int64_t size = g.at(key + "/pixels").shape()[0];
      CropPlan plan;
      plan.x = p[0];
      plan.y = p[1];
      plan.w = p[2];
      plan.h = p[3];
      plan.flip = p[4] != 0;
      plan.resized_w = plan.resized_h = size;
      cases.push_back({f, key, plan, pixels_transform(true, size)});
    }
    for (auto [name, resize, size] : {std::tuple{"/eval", 56, 48}, std::tuple{"/eval224", 256, 224}}) {
      const std::string key = f + name;
      if (!g.contains(key + "/pixels")) continue;
      const ImageTransform t = pixels_transform(false, size, resize);
      data::SampleRng rng(0, 0, 0);  // evaluation draws nothing
      cases.push_back({f, key, data::plan_crop(t, dims.width, dims.height, rng), t});
    }
  }
  return cases;
}

TEST(ImageTransforms, EqualTorchvisionPixelsForTheSameCropAndFlip) {
  const nn::TensorDict& g = golden_file("image_transforms");
  int checked = 0;
  for (const GoldenCase& c : golden_cases()) {
    Diff d;
    d.add(transform_with(image_bytes(c.file), c.file, c.transform, c.plan, 1),
          g.at(c.key + "/pixels"));
    EXPECT_LE(d.max, 1) << c.key << ": mean difference " << d.mean();
    ++checked;
  }
  EXPECT_EQ(checked, 8 * 4 + 2);  // 3 crops + 1 eval per image, and the two 224 cases
}

// See Note [DCT-scaled decoding]: the measured difference is what
// docs/data.md reports; the bounds catch a wrong region or scale.
TEST(ImageTransforms, DctScaledDecodeStaysCloseToTorchvision) {
  const nn::TensorDict& g = golden_file("image_transforms");
  Diff all;
  int scaled = 0;
  for (const GoldenCase& c : golden_cases()) {
    if (c.file.find(".jpg") == std::string::npos) continue;
    for (int scale : {2, 4, 8}) {
      if (double(c.plan.w) / scale < double(c.plan.resized_w) ||
          double(c.plan.h) / scale < double(c.plan.resized_h))
        continue;
      Diff d;
      d.add(transform_with(image_bytes(c.file), c.file, c.transform, c.plan, scale),
            g.at(c.key + "/pixels"));
      EXPECT_LT(d.mean(), 4.0) << c.key << " at 1/" << scale;
      all.max = std::max(all.max, d.max);
      all.sum += d.sum;
      all.n += d.n;
      ++scaled;
    }
  }
  EXPECT_GT(scaled, 10);
  EXPECT_LT(all.mean(), 2.5);
  std::printf("DCT-scaled decode vs torchvision: %d crops, max |diff| %d, mean |diff| %.3f\n",
              scaled, all.max, all.mean());
}

TEST(ImageTransforms, NormalisedDtypesAndLayoutsFollowThePixels) {
  const Bytes b = image_bytes("rgb420_q75.jpg");
  ImageTransform t = ImageTransform::imagenet_train(32);
  data::SampleRng rng(5, 1, 9);
  const data::ImageDims dims = data::image_dims(b, "x");
  EXPECT_EQ(dims.width, 316);
  EXPECT_EQ(dims.height, 249);
  const CropPlan plan = data::plan_crop(t, dims.width, dims.height, rng);
  ImageTransform u8 = t;
  u8.dtype = DType::u8;
  u8.layout = data::ImageLayout::hwc;
  const std::vector<uint8_t> px = transform_with(b, "x", u8, plan, 0);
  std::vector<float> chw(3 * 32 * 32), hwc(3 * 32 * 32);
  std::vector<BFloat16> bf(3 * 32 * 32);
  data::decode_with_plan(b, "x", t, plan, chw.data());
  ImageTransform t_hwc = t;
  t_hwc.layout = data::ImageLayout::hwc;
  data::decode_with_plan(b, "x", t_hwc, plan, hwc.data());
  ImageTransform t_bf = t;
  t_bf.dtype = DType::bf16;
  data::decode_with_plan(b, "x", t_bf, plan, bf.data());
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x) {
        const float want = (float(px[size_t((y * 32 + x) * 3 + c)]) / 255.0f - t.mean[size_t(c)]) /
                           t.std[size_t(c)];
        const size_t i = size_t((c * 32 + y) * 32 + x);
        ASSERT_EQ(chw[i], want) << c << "," << y << "," << x;
        ASSERT_EQ(hwc[size_t((y * 32 + x) * 3 + c)], want);
        ASSERT_EQ(bf[i].bits, BFloat16(want).bits);
      }
}

TEST(ImageTransforms, CropDrawsFollowTorchvisionsRules) {
  const ImageTransform t = ImageTransform::imagenet_train();
  int flips = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    data::SampleRng rng(1, 0, i);
    const CropPlan p = data::plan_crop(t, 500, 375, rng);
    ASSERT_TRUE(p.x >= 0 && p.y >= 0 && p.x + p.w <= 500 && p.y + p.h <= 375) << i;
    const double area = double(p.w * p.h) / (500.0 * 375.0);
    // Rounding w and h moves the area and ratio by a pixel's worth.
    EXPECT_GE(area, 0.08 * 0.9);
    EXPECT_LE(area, 1.0);
    const double ratio = double(p.w) / double(p.h);
    EXPECT_GE(ratio, 0.75 * 0.95);
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.05);
    flips += p.flip;
    data::SampleRng again(1, 0, i);
    const CropPlan q = data::plan_crop(t, 500, 375, again);
    EXPECT_TRUE(p.x == q.x && p.y == q.y && p.w == q.w && p.h == q.h && p.flip == q.flip);
  }
  EXPECT_GT(flips, 900);
  EXPECT_LT(flips, 1100);
  // No box of a 1000 x 10 strip fits the ratios: the centred fallback.
  data::SampleRng rng(0, 0, 0);
  const CropPlan f = data::plan_crop(t, 1000, 10, rng);
  EXPECT_EQ(f.h, 10);
  EXPECT_EQ(f.w, 13);  // round(10 * 4/3)
  EXPECT_EQ(f.x, (1000 - 13) / 2);
  // Evaluation: Resize(256) makes 500 x 375 into 341 x 256; CenterCrop(224)
  // takes (round(58.5) = 58 half-to-even, 16).
  const CropPlan e = data::plan_crop(ImageTransform::imagenet_eval(), 500, 375, rng);
  EXPECT_EQ(e.resized_w, 341);
  EXPECT_EQ(e.resized_h, 256);
  EXPECT_EQ(e.window_x, 58);
  EXPECT_EQ(e.window_y, 16);
}

TEST(ImageTransforms, BadOptionsAndBoxesAreValueErrors) {
  ImageTransform t;
  t.scale_min = 0.5;
  t.scale_max = 0.2;
  expect_error<ValueError>([&] { t.validate(); }, {"scale (0.5, 0.2)"});
  t = ImageTransform::imagenet_eval(224, 200);
  expect_error<ValueError>([&] { t.validate(); }, {"Resize(200)", "CenterCrop(224)"});
  t = ImageTransform{};
  t.dtype = DType::i64;
  expect_error<DTypeError>([&] { t.validate(); }, {"i64"});
  CropPlan outside{300, 0, 100, 100, 224, 224, 0, 0, false};
  std::vector<float> out(3 * 224 * 224);
  expect_error<ValueError>(
      [&] { data::decode_with_plan(image_bytes("gray.jpg"), "gray.jpg", ImageTransform{}, outside, out.data()); },
      {"gray.jpg", "outside the 303x207 image"});
}

// A corrupt header's size was believed: a PNG claiming 671088640x1245184
// pixels had the resampler allocate gigabytes before the decoder found no
// data (found by fuzzing: tests/fuzz/corpus/image_decode/regression_oom_*).
// Sizes over PIL's decompression-bomb limit, or a side over the decoder's,
// are refused as bad images.
TEST(ImageTransforms, HeadersClaimingHugeSizesAreRefused) {
  auto with_size = [](Bytes b, size_t at, int bytes, uint32_t w, uint32_t h) {
    for (int i = 0; i < bytes; ++i) {
      b[at + size_t(i)] = uint8_t(w >> (8 * (bytes - 1 - i)));
      b[at + size_t(bytes + i)] = uint8_t(h >> (8 * (bytes - 1 - i)));
    }
    return b;
  };
  const Bytes png = image_bytes("rgb.png");  // IHDR's width at byte 16, height at 20
  std::vector<float> out(3 * 224 * 224);
  data::SampleRng rng(0, 0, 0);
  const Bytes bomb = with_size(png, 16, 4, 671088640, 1245184);
  expect_error<IoError>(
      [&] { data::decode_transformed(bomb, "bomb.png", ImageTransform{}, rng, out.data()); },
      {"bomb.png", "PNG refused", "671088640x1245184", "178956970 pixels"});
  expect_error<IoError>([&] { data::image_dims(with_size(png, 16, 4, 1000001, 1), "wide.png"); },
                        {"wide.png", "1000001x1", "1000000 a side"});
  EXPECT_EQ(data::image_dims(with_size(png, 16, 4, 13377, 13377), "big.png").width, 13377);
  // A JPEG's frame header (SOFn): height, then width, 3 bytes after the marker.
  const Bytes jpeg = image_bytes("gray.jpg");
  size_t sof = 2;
  while (!(jpeg[sof] == 0xFF && (jpeg[sof + 1] == 0xC0 || jpeg[sof + 1] == 0xC2)))
    sof += 2 + ((size_t(jpeg[sof + 2]) << 8) | jpeg[sof + 3]);
  const Bytes huge_jpeg = with_size(jpeg, sof + 5, 2, 65000, 65000);  // as height, width: square
  expect_error<IoError>(
      [&] { data::decode_transformed(huge_jpeg, "huge.jpg", ImageTransform{}, rng, out.data()); },
      {"huge.jpg", "JPEG refused", "65000x65000"});
}

// ---- ImageFolderDataset ------------------------------------------------------

void copy_image(const std::string& from, const fs::path& to) {
  fs::create_directories(to.parent_path());
  write_bytes(to.string(), image_bytes(from));
}

TEST(ImageFolderDataset, ListsClassesAndFilesLikeTorchvision) {
  ScratchDir dir;
  const fs::path root = dir.dir();
  copy_image("gray.jpg", root / "b_cls" / "x.JPG");
  copy_image("rgb.png", root / "a_cls" / "sub" / "y.png");
  copy_image("cmyk.jpg", root / "a_cls" / "w.jpeg");
  write_bytes((root / "a_cls" / "notes.txt").string(), {'h', 'i'});
  copy_image("gray.jpg", root / "loose.jpg");  // not in a class folder
  data::ImageFolderDataset ds(root.string(), ImageTransform::imagenet_eval(32, 40));
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"a_cls", "b_cls"}));
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.samples()[0].path, (root / "a_cls" / "w.jpeg").string());
  EXPECT_EQ(ds.samples()[1].path, (root / "a_cls" / "sub" / "y.png").string());
  EXPECT_EQ(ds.samples()[2].path, (root / "b_cls" / "x.JPG").string());
  EXPECT_EQ(ds.label(0), 0);
  EXPECT_EQ(ds.label(2), 1);
  EXPECT_EQ(ds.spec().input_shape, (Shape{3, 32, 32}));
  const data::Example e = ds.get(2);
  EXPECT_EQ(e.target.item<int64_t>(), 1);
  // A greyscale image gives three equal planes.
  const auto* x = static_cast<const float*>(e.input.data_ptr());
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  for (int i = 0; i < 32 * 32; ++i) {
    const float r = x[i] * sd[0] + mean[0], gr = x[1024 + i] * sd[1] + mean[1];
    ASSERT_NEAR(r, gr, 1e-5);
  }
}

TEST(ImageFolderDataset, EmptyClassesAndMissingFoldersAreIoErrors) {
  ScratchDir dir;
  const fs::path root = dir.dir();
  expect_error<IoError>([&] { data::ImageFolderDataset ds(root.string()); },
                        {"Couldn't find any class folder in " + root.string()});
  copy_image("gray.jpg", root / "cat" / "a.jpg");
  fs::create_directories(root / "dog");
  write_bytes((root / "dog" / "readme.txt").string(), {'x'});
  fs::create_directories(root / "emu");
  expect_error<IoError>([&] { data::ImageFolderDataset ds(root.string()); },
                        {"Found no valid file for the classes dog, emu. Supported extensions "
                         "are: .jpg, .jpeg, .png"});
  expect_error<IoError>([&] { data::ImageFolderDataset ds((root / "nope").string()); },
                        {"nope", "not a directory"});
}

TEST(ImageFolderDataset, HeldOutPartSplitsEachClass) {
  ScratchDir dir;
  for (int i = 0; i < 7; ++i) copy_image("gray.jpg", dir.dir() / "a" / (std::to_string(i) + ".jpg"));
  for (int i = 0; i < 3; ++i) copy_image("gray.jpg", dir.dir() / "b" / (std::to_string(i) + ".jpg"));
  data::ImageFolderOptions o;
  o.holdout_every = 3;
  o.part = data::ImageFolderOptions::Part::held_out;
  data::ImageFolderDataset held(dir.dir().string(), ImageTransform{}, o);
  o.part = data::ImageFolderOptions::Part::rest;
  data::ImageFolderDataset rest(dir.dir().string(), ImageTransform{}, o);
  ASSERT_EQ(held.size(), 3);  // a/2, a/5, b/2
  EXPECT_EQ(rest.size(), 7);
  EXPECT_EQ(held.samples()[0].path, (dir.dir() / "a" / "2.jpg").string());
  EXPECT_EQ(held.samples()[2].path, (dir.dir() / "b" / "2.jpg").string());
}

// The three bad files of tools/image_data/make_image_folder.py --bad.
void write_bad_images(const fs::path& folder) {
  const Bytes good = image_bytes("rgb420_q75.jpg");
  write_bytes((folder / "truncated.jpg").string(), Bytes(good.begin(), good.begin() + ptrdiff_t(good.size() / 2)));
  Bytes corrupt = good;
  for (size_t i = 0; i + 4 < corrupt.size(); ++i)
    if (corrupt[i] == 0xFF && corrupt[i + 1] == 0xC0) {
      corrupt[i + 4] = 3;  // an impossible sample precision
      break;
    }
  write_bytes((folder / "corrupt.jpg").string(), corrupt);
  write_bytes((folder / "not_an_image.jpg").string(), Bytes(200, 'x'));
}

TEST(ImageFolderDataset, BadImagesRaiseNamingTheFileOrAreSkippedAndCounted) {
  ScratchDir dir;
  copy_image("rgb420_q75.jpg", dir.dir() / "a" / "0_good.jpg");
  write_bad_images(dir.dir() / "a");
  copy_image("progressive.jpg", dir.dir() / "b" / "good.jpg");
  data::ImageFolderDataset ds(dir.dir().string(), ImageTransform::imagenet_train(24));
  // Sorted: 0_good, corrupt, not_an_image, truncated.
  ASSERT_EQ(ds.size(), 5);
  std::vector<float> in(3 * 24 * 24);
  int64_t label = -1;
  expect_error<IoError>([&] { ds.read(1, in.data(), &label); }, {"corrupt.jpg", "corrupt JPEG"});
  expect_error<IoError>([&] { ds.read(2, in.data(), &label); },
                        {"not_an_image.jpg", "neither a JPEG nor a PNG"});
  expect_error<IoError>([&] { ds.read(3, in.data(), &label); }, {"truncated.jpg", "truncated"});

  data::ImageFolderOptions skip;
  skip.bad_images = data::BadImagePolicy::skip;
  auto sk = std::make_shared<data::ImageFolderDataset>(dir.dir().string(),
                                                       ImageTransform::imagenet_train(24), skip);
  data::DataLoader loader(sk, {.batch_size = 5, .num_workers = 2});
  int64_t rows = 0;
  for (const data::Batch& b : loader) {
    rows += b.size();
    // The three bad ones were replaced by the next good image, of class b.
    const auto* t = static_cast<const int64_t*>(b.target.data_ptr());
    EXPECT_EQ(std::vector<int64_t>(t, t + 5), (std::vector<int64_t>{0, 1, 1, 1, 1}));
  }
  EXPECT_EQ(rows, 5);
  EXPECT_EQ(sk->bad_count(), 3);
  EXPECT_EQ(sk->bad_images().size(), 3u);
}

// A folder made by the repository's script from real photographs.
fs::path make_photo_folder(const ScratchDir& dir, int classes, int per_class) {
  const std::string script =
      std::string(DDP_TEST_DATA_DIR) + "/../tools/image_data/make_image_folder.py";
  const fs::path out = dir.dir() / "photos";
  const std::string cmd = "/usr/bin/python3 " + script + " " + out.string() + " --classes " +
                          std::to_string(classes) + " --per-class " + std::to_string(per_class) +
                          " > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return out;
}

std::vector<std::vector<float>> pass_inputs(data::DataLoader& loader) {
  std::vector<std::vector<float>> out;
  for (const data::Batch& b : loader) {
    const auto* p = static_cast<const float*>(b.input.data_ptr());
    out.emplace_back(p, p + b.input.numel());
  }
  return out;
}

TEST(ImageFolderDataset, BatchesAreTheSameForAnyWorkerCountAndRedrawEachEpoch) {
  ScratchDir dir;
  const fs::path root = make_photo_folder(dir, 3, 4);
  auto ds = std::make_shared<data::ImageFolderDataset>(root.string(),
                                                       ImageTransform::imagenet_train(40));
  ASSERT_EQ(ds->size(), 12);
  std::vector<std::vector<std::vector<float>>> runs;
  for (int workers : {0, 1, 3}) {
    data::DataLoader loader(ds, {.batch_size = 5, .shuffle = true, .num_workers = workers,
                                 .seed = 7});
    loader.set_epoch(2);
    runs.push_back(pass_inputs(loader));
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
  data::DataLoader loader(ds, {.batch_size = 5, .shuffle = true, .num_workers = 2, .seed = 7});
  loader.set_epoch(3);
  EXPECT_NE(pass_inputs(loader), runs[0]);
}

}  // namespace
}  // namespace ddp::test
