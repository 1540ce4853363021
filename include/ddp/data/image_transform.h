#pragma once
// The ImageNet transforms, done while decoding: a photograph (JPEG or PNG)
// goes in, and the normalised 224 x 224 example the network reads comes out,
// written straight into its row of the batch (Note [Reading into the batch]).
//
//   training:   RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip(p)
//   evaluation: Resize(resize) + CenterCrop(size)
//   both:       ToTensor + Normalize(mean, std), as u8 (pixels, no
//               normalisation), f32 or bf16, [3, H, W] or channels-last [H, W, 3]
//
// torchvision's definitions are followed to the rounding: the crop box is
// drawn as torchvision 0.14 draws it (ten tries at a random area and aspect
// ratio, then a centre-crop fallback), and resizing is PIL's antialiased
// bilinear filter (Note [PIL's resampling]), so for the same box and flip the
// pixels equal torchvision's on a PIL image. Random draws come from the
// loader's per-example stream (Note [Per-example random streams]).
//
// Note [DCT-scaled decoding]
// With dct_scaling a JPEG is decoded at 1/2, 1/4 or 1/8 of its size when the
// crop, so reduced, still has at least `size` pixels each way (resized_w and
// resized_h for evaluation); the reduced crop is then resized to the output.
// The inverse DCT at reduced size averages blocks of pixels, slightly
// differently from PIL's filter, so the output is no longer PIL's to the
// level; docs/data.md gives the measured difference. Without dct_scaling
// every image is decoded at full size (only the rows and iMCU columns the
// crop needs: Note [Decoding only the crop]) and the result is exact.

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "ddp/data/transforms.h"
#include "ddp/tensor/tensor.h"

namespace ddp::data {

enum class ImageLayout {
  chw,  // [3, H, W]: a batch is NCHW
  hwc,  // [H, W, 3]: a batch is NHWC, i.e. channels-last (permute(0, 3, 1, 2) gives NCHW)
};

struct ImageTransform {
  bool train = true;      // RandomResizedCrop + flip; else Resize + CenterCrop
  int64_t size = 224;     // the output is size x size
  int64_t resize = 256;   // evaluation: the shorter side before the centre crop
  double scale_min = 0.08, scale_max = 1.0;          // of the image's area
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // width / height
  double flip_p = 0.5;
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
  DType dtype = DType::f32;  // u8, f32 or bf16; u8 is not normalised
  ImageLayout layout = ImageLayout::chw;
  bool dct_scaling = true;  // Note [DCT-scaled decoding]

  static ImageTransform imagenet_train(int64_t size = 224);
  static ImageTransform imagenet_eval(int64_t size = 224, int64_t resize = 256);

  // ValueError for sizes < 1, a bad scale or ratio range, p outside [0, 1],
  // a zero std, or a dtype other than u8, f32, bf16.
  void validate() const;
  Shape output_shape() const;  // [3, size, size] or [size, size, 3]
  std::string describe() const;
};

// Where an image's output comes from: the box [x, x + w) x [y, y + h) of the
// image is resized to resized_w x resized_h, and the size x size window at
// (window_x, window_y) of that is the output, mirrored when flip.
struct CropPlan {
  int64_t x = 0, y = 0, w = 0, h = 0;
  int64_t resized_w = 0, resized_h = 0;
  int64_t window_x = 0, window_y = 0;
  bool flip = false;
};

// The width and height in an image's header (JPEG or PNG). IoError naming
// `name` otherwise.
struct ImageDims {
  int64_t width = 0, height = 0;
};
ImageDims image_dims(std::span<const uint8_t> bytes, const std::string& name);

// torchvision's draw (training) or the evaluation geometry for a width x
// height image; draws from rng only when training.
CropPlan plan_crop(const ImageTransform& t, int64_t width, int64_t height, SampleRng& rng);

// Decodes `bytes` (JPEG or PNG), draws its plan and writes the transformed
// image to `out` (t.output_shape() of t.dtype, contiguous). IoError naming
// `name` for an unreadable, corrupt or truncated image.
void decode_transformed(std::span<const uint8_t> bytes, const std::string& name,
                        const ImageTransform& t, SampleRng& rng, void* out);
// The same with a given plan (for tests and tools); `scale` 0 lets
// t.dct_scaling choose, else forces that DCT denominator (1, 2, 4, 8).
void decode_with_plan(std::span<const uint8_t> bytes, const std::string& name,
                      const ImageTransform& t, const CropPlan& plan, void* out, int scale = 0);

}  // namespace ddp::data
