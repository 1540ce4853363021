#pragma once
// Internal: JPEG and PNG decoding into 8-bit RGB, with the region and DCT
// scaling that the image transforms ask for (image_transform.h), and the
// JPEG encoder that tools/pack_images uses.
//
// Note [Decoding only the crop]
// A training crop of ImageNet covers on average a third of the photograph
// and is then shrunk to 224 x 224, so decoding the whole image at full size
// wastes most of the work. decode_rgb() takes the rectangle the resampler
// will read and a largest DCT scale denominator (1, 2, 4 or 8): libjpeg-turbo
// then runs the inverse DCT at that reduced size (jpeg's scale_denom), skips
// the rows above the rectangle (jpeg_skip_scanlines), stops below it, and
// decodes only the iMCU columns around it (jpeg_crop_scanline). Fancy
// upsampling of the chroma planes reads one neighbouring sample on each side,
// and the cropped and skipped decode treats its own borders as image edges,
// so the region is widened by one iMCU (16 pixels) on each side: inside the
// asked rectangle the pixels are then those of a full decode with the same
// settings (islow IDCT, fancy upsampling: libjpeg's defaults, which PIL uses
// too). TurboJPEG's own API (libturbojpeg 2.1, Debian 12) cannot crop or
// skip rows, hence libjpeg's API of the same library. PNG has no such
// shortcuts: it is decoded whole.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ddp::data::detail {

enum class ImageFormat { jpeg, png, unknown };
ImageFormat sniff_image(std::span<const uint8_t> bytes);

struct ImageSize {
  int width = 0, height = 0;
};
// The most pixels an image may have: PIL's decompression-bomb limit
// (2 * Image.MAX_IMAGE_PIXELS, above which Image.open raises
// DecompressionBombError), so the images torchvision's ImageFolder refuses
// are refused here too. A corrupt header's size is otherwise believed and
// allocated for (the resampler's weights, the decoded pixels) before the
// decoder finds the data missing.
constexpr int64_t kMaxImagePixels = 178956970;

// The image's size from its header. IoError naming `name` for anything but a
// readable JPEG or PNG header, and for a size the decoders refuse: more than
// kMaxImagePixels, a side above libjpeg's or libpng's limit.
ImageSize read_image_size(std::span<const uint8_t> bytes, const std::string& name);

// Integer rectangle [x0, x1) x [y0, y1).
struct PixelRect {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int width() const { return x1 - x0; }
  int height() const { return y1 - y0; }
};

// RGB pixels of a rectangle of the image as decoded at 1/scale size: pixel
// (x, y) of the scaled image is at rgb[((y - origin_y) * stride + x - origin_x) * 3].
struct DecodedRegion {
  std::vector<uint8_t> rgb;
  int origin_x = 0, origin_y = 0;  // scaled-image coordinates of rgb[0]
  int width = 0, height = 0;       // of the region held
  int stride = 0;                  // pixels per row
  int scale = 1;                   // the DCT scale denominator used
  int scaled_width = 0, scaled_height = 0;  // of the whole scaled image
  const uint8_t* at(int x, int y) const {
    return rgb.data() + (size_t(y - origin_y) * size_t(stride) + size_t(x - origin_x)) * 3;
  }
};

// Decodes at least `need` (in scaled-image coordinates for `scale`; scale > 1
// only for JPEG) into RGB: greyscale replicated, CMYK (Adobe, inverted)
// converted as PIL's convert("RGB") does, PNG palettes expanded, alpha
// dropped, 16-bit samples cut to their high byte. IoError naming `name` for a
// corrupt or truncated file. See Note [Decoding only the crop].
DecodedRegion decode_rgb(std::span<const uint8_t> bytes, const std::string& name, int scale,
                         PixelRect need);

// Baseline JPEG (4:2:0, islow DCT) of an RGB image at `quality` (1..100).
std::vector<uint8_t> encode_jpeg(const uint8_t* rgb, int width, int height, int quality);

}  // namespace ddp::data::detail
