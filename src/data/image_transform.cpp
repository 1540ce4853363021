// Decoding with the ImageNet transforms (image_transform.h).

#include "ddp/data/image_transform.h"

#include <algorithm>
#include <cmath>

#include "data/image_codec.h"
#include "data/image_resample.h"
#include "ddp/core/half.h"

namespace ddp::data {

namespace {

using detail::DecodedRegion;
using detail::ImageFormat;
using detail::PixelRect;
using detail::ResampleAxis;

// Python's round(): half to even, which std::nearbyint does in the default
// rounding mode.
int64_t round_half_even(double v) { return int64_t(std::nearbyint(v)); }

// The largest DCT denominator that leaves the box at least the resized size.
// See Note [DCT-scaled decoding].
int choose_scale(const ImageTransform& t, const CropPlan& p) {
  if (!t.dct_scaling) return 1;
  for (int d : {8, 4, 2})
    if (double(p.w) / d >= double(p.resized_w) && double(p.h) / d >= double(p.resized_h)) return d;
  return 1;
}

// One axis of the plan in the coordinates of the image decoded at 1/scale:
// the box [begin, begin + extent) of an image of `full` samples.
struct AxisPlan {
  int clamp_begin = 0;  // the first scaled sample the box may read
  ResampleAxis axis;
};
AxisPlan plan_axis(int64_t begin, int64_t extent, int64_t full, int scale, int64_t out_size,
                   int64_t window, int64_t window_size) {
  const int64_t scaled_full = (full + scale - 1) / scale;  // libjpeg rounds up
  const double b0 = double(begin) / scale, b1 = double(begin + extent) / scale;
  AxisPlan a;
  a.clamp_begin = int(std::floor(b0));
  const int clamp_end = int(std::min<double>(double(scaled_full), std::ceil(b1)));
  a.axis = detail::bilinear_axis(clamp_end - a.clamp_begin, b0 - a.clamp_begin,
                                 b1 - a.clamp_begin, int(out_size), int(window),
                                 int(window + window_size));
  return a;
}

// The u8 [size][size][3] pixels into the output's dtype and layout.
void write_output(const uint8_t* px, const ImageTransform& t, bool flip, void* out) {
  const int64_t n = t.size;
  const bool chw = t.layout == ImageLayout::chw;
  auto dst_index = [&](int64_t c, int64_t y, int64_t x) {
    return chw ? (c * n + y) * n + x : (y * n + x) * 3 + c;
  };
  auto for_each = [&](auto&& put) {
    for (int64_t y = 0; y < n; ++y)
      for (int64_t x = 0; x < n; ++x) {
        const uint8_t* p = px + (y * n + (flip ? n - 1 - x : x)) * 3;
        for (int64_t c = 0; c < 3; ++c) put(dst_index(c, y, x), c, p[c]);
      }
  };
  if (t.dtype == DType::u8) {
    auto* o = static_cast<uint8_t*>(out);
    for_each([&](int64_t i, int64_t, uint8_t v) { o[i] = v; });
    return;
  }
  // ToTensor then Normalize, in f32 as torchvision computes them.
  float lut[3][256];
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) lut[c][v] = (float(v) / 255.0f - t.mean[c]) / t.std[c];
  if (t.dtype == DType::f32) {
    auto* o = static_cast<float*>(out);
    for_each([&](int64_t i, int64_t c, uint8_t v) { o[i] = lut[c][v]; });
  } else {
    auto* o = static_cast<BFloat16*>(out);
    for_each([&](int64_t i, int64_t c, uint8_t v) { o[i] = BFloat16(lut[c][v]); });
  }
}

}  // namespace

ImageTransform ImageTransform::imagenet_train(int64_t size) {
  ImageTransform t;
  t.size = size;
  return t;
}

ImageTransform ImageTransform::imagenet_eval(int64_t size, int64_t resize) {
  ImageTransform t;
  t.train = false;
  t.size = size;
  t.resize = resize;
  return t;
}

void ImageTransform::validate() const {
  DDP_CHECK(size >= 1, "ImageTransform: size {} < 1", size);
  DDP_CHECK(train || resize >= size,
            "ImageTransform: Resize({}) is smaller than CenterCrop({}) (padding is not supported)",
            resize, size);
  DDP_CHECK(scale_min > 0 && scale_min <= scale_max && scale_max <= 1.0,
            "ImageTransform: scale ({}, {}) is not a range within (0, 1]", scale_min, scale_max);
  DDP_CHECK(ratio_min > 0 && ratio_min <= ratio_max,
            "ImageTransform: ratio ({}, {}) is not a positive range", ratio_min, ratio_max);
  DDP_CHECK(flip_p >= 0 && flip_p <= 1, "ImageTransform: flip probability {} is not in [0, 1]",
            flip_p);
  for (float s : std) DDP_CHECK(s != 0.0f, "ImageTransform: std has a zero");
  DDP_CHECK_T(DTypeError, dtype == DType::u8 || dtype == DType::f32 || dtype == DType::bf16,
              "ImageTransform: dtype {} is not u8, f32 or bf16", dtype_name(dtype));
}

Shape ImageTransform::output_shape() const {
  return layout == ImageLayout::chw ? Shape{3, size, size} : Shape{size, size, 3};
}

std::string ImageTransform::describe() const {
  const std::string geometry =
      train ? fmt::format("RandomResizedCrop({}, scale=({}, {}), ratio=({:.4g}, {:.4g})) + "
                          "RandomHorizontalFlip({})",
                          size, scale_min, scale_max, ratio_min, ratio_max, flip_p)
            : fmt::format("Resize({}) + CenterCrop({})", resize, size);
  return fmt::format("{} -> {}{}{}", geometry, dtype_name(dtype), shape_str(output_shape()),
                     dct_scaling ? ", DCT-scaled decode" : "");
}

ImageDims image_dims(std::span<const uint8_t> bytes, const std::string& name) {
  const detail::ImageSize s = detail::read_image_size(bytes, name);
  return {s.width, s.height};
}

CropPlan plan_crop(const ImageTransform& t, int64_t width, int64_t height, SampleRng& rng) {
  CropPlan p;
  if (!t.train) {
    // Resize(resize): the shorter side becomes `resize`, the longer one
    // int(resize * long / short); CenterCrop rounds its offsets half to even.
    const bool wide = width >= height;
    const int64_t s = wide ? height : width, l = wide ? width : height;
    const auto long_side = int64_t(double(t.resize * l) / double(s));
    p.w = width;
    p.h = height;
    p.resized_w = wide ? long_side : t.resize;
    p.resized_h = wide ? t.resize : long_side;
    p.window_x = round_half_even(double(p.resized_w - t.size) / 2.0);
    p.window_y = round_half_even(double(p.resized_h - t.size) / 2.0);
    return p;
  }
  p.resized_w = p.resized_h = t.size;
  const double area = double(width) * double(height);
  const double log_lo = std::log(t.ratio_min), log_hi = std::log(t.ratio_max);
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target = area * (t.scale_min + (t.scale_max - t.scale_min) * rng.uniform());
    const double ratio = std::exp(log_lo + (log_hi - log_lo) * rng.uniform());
    const int64_t w = round_half_even(std::sqrt(target * ratio));
    const int64_t h = round_half_even(std::sqrt(target / ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      p.w = w;
      p.h = h;
      p.y = rng.integer(0, height - h);
      p.x = rng.integer(0, width - w);
      found = true;
    }
  }
  if (!found) {  // torchvision's fallback: the largest centred box within the ratios
    const double in_ratio = double(width) / double(height);
    if (in_ratio < t.ratio_min) {
      p.w = width;
      p.h = round_half_even(double(width) / t.ratio_min);
    } else if (in_ratio > t.ratio_max) {
      p.h = height;
      p.w = round_half_even(double(height) * t.ratio_max);
    } else {
      p.w = width;
      p.h = height;
    }
    p.y = (height - p.h) / 2;
    p.x = (width - p.w) / 2;
  }
  p.flip = rng.uniform() < t.flip_p;
  return p;
}

void decode_with_plan(std::span<const uint8_t> bytes, const std::string& name,
                      const ImageTransform& t, const CropPlan& plan, void* out, int scale) {
  const detail::ImageSize size = detail::read_image_size(bytes, name);
  DDP_CHECK(plan.w >= 1 && plan.h >= 1 && plan.x >= 0 && plan.y >= 0 &&
                plan.x + plan.w <= size.width && plan.y + plan.h <= size.height,
            "'{}': crop box {}x{} at ({}, {}) is outside the {}x{} image", name, plan.w, plan.h,
            plan.x, plan.y, size.width, size.height);
  DDP_CHECK(plan.window_x >= 0 && plan.window_y >= 0 &&
                plan.window_x + t.size <= plan.resized_w && plan.window_y + t.size <= plan.resized_h,
            "'{}': the {}x{} window at ({}, {}) is outside the {}x{} resized image", name, t.size,
            t.size, plan.window_x, plan.window_y, plan.resized_w, plan.resized_h);
  if (scale == 0) scale = choose_scale(t, plan);
  DDP_CHECK(scale == 1 || scale == 2 || scale == 4 || scale == 8,
            "DCT scale denominator {} is not 1, 2, 4 or 8", scale);
  if (detail::sniff_image(bytes) != ImageFormat::jpeg) scale = 1;  // PNG: no DCT

  const AxisPlan ax =
      plan_axis(plan.x, plan.w, size.width, scale, plan.resized_w, plan.window_x, t.size);
  const AxisPlan ay =
      plan_axis(plan.y, plan.h, size.height, scale, plan.resized_h, plan.window_y, t.size);
  const PixelRect need{ax.clamp_begin + ax.axis.input_begin(), ay.clamp_begin + ay.axis.input_begin(),
                       ax.clamp_begin + ax.axis.input_end(), ay.clamp_begin + ay.axis.input_end()};
  const DecodedRegion region = detail::decode_rgb(bytes, name, scale, need);
  if (need.x0 < region.origin_x || need.y0 < region.origin_y ||
      need.x1 > region.origin_x + region.width || need.y1 > region.origin_y + region.height)
    DDP_THROW(Error, "'{}': the decoder returned [{}, {}) x [{}, {}) at 1/{}, not the [{}, {}) x [{}, {}) asked for",
              name, region.origin_x, region.origin_x + region.width, region.origin_y,
              region.origin_y + region.height, scale, need.x0, need.x1, need.y0, need.y1);
  thread_local std::vector<uint8_t> pixels;
  pixels.resize(size_t(t.size) * size_t(t.size) * 3);
  detail::resample_rgb(region, ax.clamp_begin, ay.clamp_begin, ax.axis, ay.axis, pixels.data());
  write_output(pixels.data(), t, plan.flip, out);
}

void decode_transformed(std::span<const uint8_t> bytes, const std::string& name,
                        const ImageTransform& t, SampleRng& rng, void* out) {
  const detail::ImageSize size = detail::read_image_size(bytes, name);
  const CropPlan plan = plan_crop(t, size.width, size.height, rng);
  decode_with_plan(bytes, name, t, plan, out, 0);
}

}  // namespace ddp::data
