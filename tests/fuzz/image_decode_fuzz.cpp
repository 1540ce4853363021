// libFuzzer target: the JPEG and PNG decoders (src/data/image_codec.cpp:
// libjpeg-turbo with cropped, DCT-scaled decode; libpng) and the transforms
// around them (image_transform.cpp, image_resample.cpp), driven as the image
// datasets drive them. Decoded from memory, as the datasets do.
//
// The first 8 input bytes choose what is asked (as the transform options and
// a training crop's random draws would), the rest is the image file:
//   byte 0, bits 0-1: 0: decode_rgb of the whole image at full size
//                     1: decode_transformed, training (RandomResizedCrop, the
//                        draws seeded by bytes 6-7)
//                     2: decode_transformed, evaluation (Resize + CenterCrop)
//                     3: decode_with_plan, the crop box from bytes 2-5 and
//                        the DCT scale 1/2/4/8 from bits 2-3
//           bit 4: f32 output, bit 5: bf16 (else u8); bit 6: channels-last;
//           bit 7: no DCT scaling
//   byte 1: output size 1 + byte % 32 (evaluation: Resize to size + byte/32)
//   bytes 2-5: crop box x, y, width, height as fractions of the image
//   bytes 6-7: the random draws' seed; mode 3: resized size and window
//
// The libraries' own code is not instrumented (the system's libjpeg and
// libpng are linked); the project's decoder around them is.
#include <cstring>
#include <vector>

#include "data/image_codec.h"
#include "ddp/core/dtype.h"
#include "ddp/data/image_transform.h"
#include "fuzz_input.h"

namespace {

using namespace ddp::data;

// Mode 3's plan: a box inside the width x height image, resized to at least
// the output size, and a window inside that.
CropPlan plan_from_bytes(const uint8_t* c, int64_t width, int64_t height, int64_t size) {
  CropPlan p;
  p.x = c[2] * width / 256;
  p.y = c[3] * height / 256;
  p.w = 1 + (width - p.x - 1) * c[4] / 255;
  p.h = 1 + (height - p.y - 1) * c[5] / 255;
  p.resized_w = size + (c[6] & 15);
  p.resized_h = size + (c[6] >> 4);
  p.window_x = (c[7] & 15) % (p.resized_w - size + 1);
  p.window_y = (c[7] >> 4) % (p.resized_h - size + 1);
  p.flip = (c[6] ^ c[7]) & 1;
  return p;
}

void decode(const uint8_t* c, std::span<const uint8_t> image) {
  const std::string name = "fuzz input";
  const int mode = c[0] & 3;
  if (mode == 0) {
    const detail::ImageSize s = detail::read_image_size(image, name);
    const detail::DecodedRegion r = detail::decode_rgb(image, name, 1, {0, 0, s.width, s.height});
    // The pixels held as the region says (the resampler reads them so). Its
    // size is libjpeg's, which decode_with_plan checks against the header's.
    if (r.width < 0 || r.height < 0 || r.stride < r.width ||
        r.rgb.size() < size_t(r.stride) * size_t(r.height) * 3)
      std::abort();
    return;
  }
  ImageTransform t = mode == 2 ? ImageTransform::imagenet_eval(1 + c[1] % 32, 1 + c[1] % 32 + c[1] / 32)
                               : ImageTransform::imagenet_train(1 + c[1] % 32);
  t.dtype = c[0] & 0x10 ? ddp::DType::f32 : c[0] & 0x20 ? ddp::DType::bf16 : ddp::DType::u8;
  t.layout = c[0] & 0x40 ? ImageLayout::hwc : ImageLayout::chw;
  t.dct_scaling = !(c[0] & 0x80);
  // Exactly the output's bytes, so that a write past it is caught.
  std::vector<uint8_t> out(size_t(t.size * t.size * 3) * ddp::element_size(t.dtype));
  if (mode == 3) {
    const detail::ImageSize s = detail::read_image_size(image, name);
    const CropPlan plan = plan_from_bytes(c, s.width, s.height, t.size);
    decode_with_plan(image, name, t, plan, out.data(), 1 << ((c[0] >> 2) & 3));
  } else {
    SampleRng rng(c[6] | uint64_t(c[7]) << 8, 0, 0);
    decode_transformed(image, name, t, rng, out.data());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  // A copy of exactly the image's bytes, so that a read past its end is caught.
  const std::vector<uint8_t> image(data + 8, data + size);
  ddp::fuzz::expect_only_ddp_errors([&] { decode(data, image); });
  return 0;
}
