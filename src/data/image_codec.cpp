// JPEG and PNG decoding to RGB, JPEG encoding (image_codec.h). See Note
// [Decoding only the crop].

#include "data/image_codec.h"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
// jpeglib.h needs size_t and FILE declared before it.
#include <jerror.h>
#include <jpeglib.h>

#include <algorithm>

#include "ddp/core/error.h"

namespace ddp::data::detail {

namespace {

// Whether a width x height image may be decoded (kMaxImagePixels, and the
// library's limit on a side); refuse() throws the error for one that may not.
bool fits(uint64_t width, uint64_t height, uint64_t max_side) {
  return width * height <= uint64_t(kMaxImagePixels) && width <= max_side && height <= max_side;
}
[[noreturn]] void refuse(const std::string& name, const char* format, uint64_t width,
                         uint64_t height, uint64_t max_side) {
  DDP_THROW(IoError,
            "'{}': {} refused: its header's size {}x{} is over the limit of {} pixels or {} a side "
            "(a corrupt header, or an image too big to decode)",
            name, format, width, height, kMaxImagePixels, max_side);
}

// ---- JPEG -------------------------------------------------------------------

// libjpeg reports errors through a callback that must not return; it jumps
// back to the setjmp in the function that called libjpeg. Only C frames
// (libjpeg's) lie between them, and the functions that setjmp keep their C++
// objects alive across the jump (declared before it).
struct JpegErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
};

[[noreturn]] void jpeg_on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// libjpeg carries on after a truncated or damaged entropy-coded segment with
// grey filler and only warns; a training sample made of filler is worse than
// an error, so those two warnings (as PIL's "image file is truncated") fail.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER) jpeg_on_error(cinfo);
}

void install_errors(jpeg_common_struct* cinfo, JpegErrorMgr& err) {
  cinfo->err = jpeg_std_error(&err.pub);
  err.pub.error_exit = jpeg_on_error;
  err.pub.emit_message = jpeg_on_message;
}

// A JPEG's entropy-coded data ends with the EOI marker (FF D9), possibly
// followed by padding; without it the file was cut short. Checked up front
// because a cropped decode stops before the end of the data.
bool has_eoi(std::span<const uint8_t> b) {
  const size_t n = b.size(), lo = n > 4096 ? n - 4096 : 2;
  for (size_t i = n; i-- > lo;)
    if (b[i - 1] == 0xFF && b[i] == 0xD9) return true;
  return false;
}

// PIL's CMYK -> RGB (Adobe's inverted CMYK, the convention PIL assumes for
// every CMYK JPEG): with c, m, y, k the un-inverted inks, each channel is
// (255 - k) - round((255 - k) * ink / 255), in its fixed-point rounding.
inline uint8_t cmyk_channel(int raw_ink, int raw_k) {
  const int ink = 255 - raw_ink, nk = raw_k;  // nk = 255 - (255 - raw_k)
  const int t = ink * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return uint8_t(std::clamp(v, 0, 255));
}

void convert_row(const uint8_t* in, int components, int n, uint8_t* out) {
  if (components == 3) {
    std::memcpy(out, in, size_t(n) * 3);
  } else if (components == 1) {
    for (int i = 0; i < n; ++i) out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = in[i];
  } else {  // CMYK
    for (int i = 0; i < n; ++i, in += 4, out += 3) {
      out[0] = cmyk_channel(in[0], in[3]);
      out[1] = cmyk_channel(in[1], in[3]);
      out[2] = cmyk_channel(in[2], in[3]);
    }
  }
}

DecodedRegion decode_jpeg(std::span<const uint8_t> bytes, const std::string& name, int scale,
                          PixelRect need) {
  DecodedRegion r;
  std::vector<uint8_t> row;
  jpeg_decompress_struct cinfo{};
  JpegErrorMgr err;
  install_errors(reinterpret_cast<jpeg_common_struct*>(&cinfo), err);
  jpeg_create_decompress(&cinfo);
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    DDP_THROW(IoError, "'{}': corrupt JPEG: {}", name, err.message);
  }
  if (!has_eoi(bytes)) {
    jpeg_destroy_decompress(&cinfo);
    DDP_THROW(IoError, "'{}': truncated JPEG: no end-of-image marker in its {} bytes", name,
              bytes.size());
  }
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  if (!fits(cinfo.image_width, cinfo.image_height, JPEG_MAX_DIMENSION)) {
    jpeg_destroy_decompress(&cinfo);
    refuse(name, "JPEG", cinfo.image_width, cinfo.image_height, JPEG_MAX_DIMENSION);
  }
  int components = 3;
  if (cinfo.jpeg_color_space == JCS_GRAYSCALE) {
    cinfo.out_color_space = JCS_GRAYSCALE;
    components = 1;
  } else if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    cinfo.out_color_space = JCS_CMYK;
    components = 4;
  } else {
    cinfo.out_color_space = JCS_RGB;
  }
  cinfo.scale_num = 1;
  cinfo.scale_denom = unsigned(scale);
  jpeg_start_decompress(&cinfo);
  const int w = int(cinfo.output_width), h = int(cinfo.output_height);
  constexpr int kMargin = 16;  // one iMCU; see Note [Decoding only the crop]
  const int x0 = std::clamp(need.x0 - kMargin, 0, w), x1 = std::clamp(need.x1 + kMargin, 0, w);
  const int y0 = std::clamp(need.y0 - kMargin, 0, h), y1 = std::clamp(need.y1 + kMargin, 0, h);
  JDIMENSION xoff = JDIMENSION(x0), cw = JDIMENSION(std::max(1, x1 - x0));
  if (x0 > 0 || x1 < w) jpeg_crop_scanline(&cinfo, &xoff, &cw);
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, JDIMENSION(y0));
  r.origin_x = int(xoff);
  r.origin_y = y0;
  r.width = r.stride = int(cinfo.output_width);  // the cropped width after jpeg_crop_scanline
  r.height = std::max(0, y1 - y0);
  r.scale = scale;
  r.scaled_width = w;
  r.scaled_height = h;
  r.rgb.resize(size_t(r.width) * size_t(r.height) * 3);
  row.resize(size_t(r.width) * size_t(components));
  for (int y = 0; y < r.height; ++y) {
    JSAMPROW p = row.data();
    if (jpeg_read_scanlines(&cinfo, &p, 1) != 1)
      DDP_THROW(IoError, "'{}': corrupt JPEG: row {} could not be decoded", name, y0 + y);
    convert_row(row.data(), components, r.width, r.rgb.data() + size_t(y) * size_t(r.width) * 3);
  }
  // The rows below the region are never decoded.
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return r;
}

// ---- PNG --------------------------------------------------------------------

struct PngSource {
  std::span<const uint8_t> bytes;
  size_t pos = 0;
};

void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (src->pos + n > src->bytes.size()) png_error(png, "the file ends inside the image data");
  std::memcpy(out, src->bytes.data() + src->pos, n);
  src->pos += n;
}

struct PngMessage {
  char text[256] = {};
};
[[noreturn]] void png_on_error(png_structp png, png_const_charp msg) {
  auto* m = static_cast<PngMessage*>(png_get_error_ptr(png));
  std::snprintf(m->text, sizeof m->text, "%s", msg);
  png_longjmp(png, 1);
}
void png_on_warning(png_structp, png_const_charp) {}

DecodedRegion decode_png(std::span<const uint8_t> bytes, const std::string& name) {
  DecodedRegion r;
  std::vector<png_bytep> rows;
  PngSource src{bytes};
  PngMessage msg;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &msg, png_on_error,
                                           png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_read_struct(&png, &info, nullptr);
    DDP_THROW(IoError, "'{}': cannot start the PNG decoder", name);
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    DDP_THROW(IoError, "'{}': corrupt PNG: {}", name, msg.text);
  }
  png_set_read_fn(png, &src, png_read_mem);
  png_read_info(png, info);
  if (const uint32_t w = png_get_image_width(png, info), h = png_get_image_height(png, info);
      !fits(w, h, PNG_USER_WIDTH_MAX)) {
    png_destroy_read_struct(&png, &info, nullptr);
    refuse(name, "PNG", w, h, PNG_USER_WIDTH_MAX);
  }
  // To 8-bit RGB as PIL's convert("RGB"): palettes expanded, alpha dropped
  // (not composited), 16-bit samples cut to their high byte.
  png_set_expand(png);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int w = int(png_get_image_width(png, info)), h = int(png_get_image_height(png, info));
  if (png_get_rowbytes(png, info) != size_t(w) * 3)
    png_error(png, "unexpected row layout after conversion to RGB");
  r.width = r.stride = r.scaled_width = w;
  r.height = r.scaled_height = h;
  r.rgb.resize(size_t(w) * size_t(h) * 3);
  rows.resize(size_t(h));
  for (int y = 0; y < h; ++y) rows[size_t(y)] = r.rgb.data() + size_t(y) * size_t(w) * 3;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return r;
}

// The size from the frame header (SOFn), found by walking the marker
// segments; cheaper than starting libjpeg, which decode_jpeg does anyway.
ImageSize jpeg_size(std::span<const uint8_t> b, const std::string& name) {
  size_t i = 2;
  while (i + 4 <= b.size()) {
    if (b[i] != 0xFF) DDP_THROW(IoError, "'{}': corrupt JPEG header: no marker at byte {}", name, i);
    const uint8_t m = b[i + 1];
    if (m == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    const size_t len = (size_t(b[i + 2]) << 8) | b[i + 3];
    const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (sof && i + 9 <= b.size()) {
      const ImageSize s{int((b[i + 7] << 8) | b[i + 8]), int((b[i + 5] << 8) | b[i + 6])};
      if (s.width <= 0 || s.height <= 0)
        DDP_THROW(IoError, "'{}': corrupt JPEG header: size {}x{}", name, s.width, s.height);
      if (!fits(s.width, s.height, JPEG_MAX_DIMENSION))
        refuse(name, "JPEG", s.width, s.height, JPEG_MAX_DIMENSION);
      return s;
    }
    if (m == 0xDA || m == 0xD9 || len < 2) break;  // scan data or the end before any frame
    i += 2 + len;
  }
  DDP_THROW(IoError, "'{}': corrupt or truncated JPEG header: no frame header in {} bytes", name,
            b.size());
}

constexpr uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

}  // namespace

ImageFormat sniff_image(std::span<const uint8_t> b) {
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageFormat::jpeg;
  if (b.size() >= 8 && std::memcmp(b.data(), kPngMagic, 8) == 0) return ImageFormat::png;
  return ImageFormat::unknown;
}

ImageSize read_image_size(std::span<const uint8_t> bytes, const std::string& name) {
  switch (sniff_image(bytes)) {
    case ImageFormat::jpeg: return jpeg_size(bytes, name);
    case ImageFormat::png: {
      // IHDR: length, "IHDR", then big-endian width and height.
      if (bytes.size() < 24 || std::memcmp(bytes.data() + 12, "IHDR", 4) != 0)
        DDP_THROW(IoError, "'{}': corrupt PNG: no IHDR chunk after the signature", name);
      auto be32 = [&](size_t o) {
        return int((uint32_t(bytes[o]) << 24) | (uint32_t(bytes[o + 1]) << 16) |
                   (uint32_t(bytes[o + 2]) << 8) | uint32_t(bytes[o + 3]));
      };
      const ImageSize s{be32(16), be32(20)};
      if (s.width <= 0 || s.height <= 0)
        DDP_THROW(IoError, "'{}': corrupt PNG: size {}x{}", name, s.width, s.height);
      if (!fits(s.width, s.height, PNG_USER_WIDTH_MAX))
        refuse(name, "PNG", s.width, s.height, PNG_USER_WIDTH_MAX);
      return s;
    }
    case ImageFormat::unknown: break;
  }
  DDP_THROW(IoError, "'{}' is neither a JPEG nor a PNG file ({} bytes, starting {})", name,
            bytes.size(), bytes.empty() ? std::string("empty") : fmt::format("0x{:02x}", bytes[0]));
}

DecodedRegion decode_rgb(std::span<const uint8_t> bytes, const std::string& name, int scale,
                         PixelRect need) {
  switch (sniff_image(bytes)) {
    case ImageFormat::jpeg: return decode_jpeg(bytes, name, scale, need);
    case ImageFormat::png: return decode_png(bytes, name);
    case ImageFormat::unknown: break;
  }
  read_image_size(bytes, name);  // throws the message for an unknown format
  DDP_THROW(IoError, "'{}': unknown image format", name);
}

std::vector<uint8_t> encode_jpeg(const uint8_t* rgb, int width, int height, int quality) {
  jpeg_compress_struct cinfo{};
  JpegErrorMgr err;
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  install_errors(reinterpret_cast<jpeg_common_struct*>(&cinfo), err);
  jpeg_create_compress(&cinfo);
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    std::free(out);
    DDP_THROW(IoError, "JPEG encoding of a {}x{} image failed: {}", width, height, err.message);
  }
  jpeg_mem_dest(&cinfo, &out, &out_size);
  cinfo.image_width = JDIMENSION(width);
  cinfo.image_height = JDIMENSION(height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, std::clamp(quality, 1, 100), TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    auto* row = const_cast<JSAMPROW>(rgb + size_t(cinfo.next_scanline) * size_t(width) * 3);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<uint8_t> bytes(out, out + out_size);
  jpeg_destroy_compress(&cinfo);
  std::free(out);
  return bytes;
}

}  // namespace ddp::data::detail
