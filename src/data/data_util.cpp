// Whole-file reads with transparent gzip (data_util.h).

#include "data/data_util.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "ddp/core/error.h"
#include "ddp/io/file.h"

// zlib is optional (src/CMakeLists.txt links it when found). The build defines
// DDP_HAVE_ZLIB when it does; otherwise the header's presence stands in for
// it, since find_package(ZLIB) succeeds exactly when header and library are
// installed.
#ifndef DDP_HAVE_ZLIB
#if __has_include(<zlib.h>)
#define DDP_HAVE_ZLIB 1
#else
#define DDP_HAVE_ZLIB 0
#endif
#endif
#if DDP_HAVE_ZLIB
#include <zlib.h>
#endif

namespace ddp::data::detail {

bool is_gzip(const std::vector<uint8_t>& head) {
  return head.size() >= 2 && head[0] == 0x1f && head[1] == 0x8b;
}

#if DDP_HAVE_ZLIB
static std::vector<uint8_t> gunzip(const std::string& path, const std::vector<uint8_t>& gz) {
  // The trailer's ISIZE (size mod 2^32) is a good first guess for the output;
  // it is only a capacity hint, as a damaged file may lie.
  std::vector<uint8_t> out;
  if (gz.size() >= 18) {
    uint32_t isize = 0;
    std::memcpy(&isize, gz.data() + gz.size() - 4, 4);  // little-endian, as x86/ARM
    out.reserve(std::min<size_t>(isize, gz.size() * 1032));
  }
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header and trailer (CRC-32 and length are
  // checked by zlib).
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
    DDP_THROW(IoError, "'{}': cannot initialise zlib: {}", path, zs.msg ? zs.msg : "?");
  zs.next_in = const_cast<Bytef*>(gz.data());
  size_t fed = 0;
  constexpr size_t kChunk = size_t(1) << 30;  // avail_in is 32-bit
  for (;;) {
    if (zs.avail_in == 0 && fed < gz.size()) {
      zs.avail_in = uInt(std::min(kChunk, gz.size() - fed));
      fed += zs.avail_in;
    }
    if (out.size() == out.capacity()) out.reserve(std::max<size_t>(out.capacity() * 2, 1 << 16));
    const size_t before = out.size();
    out.resize(out.capacity());
    zs.next_out = out.data() + before;
    zs.avail_out = uInt(std::min(kChunk, out.size() - before));
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(out.size() - zs.avail_out);
    const size_t consumed = fed - zs.avail_in;
    if (rc == Z_STREAM_END) {
      // Concatenated gzip members (gzip -c a b > ab) form one stream.
      if (consumed == gz.size()) break;
      inflateReset(&zs);
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && consumed == gz.size()) {
      inflateEnd(&zs);
      DDP_THROW(IoError,
                "'{}': truncated gzip stream: the compressed data ends at byte {} before the "
                "end of the stream ({} bytes decompressed so far)",
                path, consumed, out.size());
    }
    std::string msg = zs.msg ? zs.msg : "error " + std::to_string(rc);
    inflateEnd(&zs);
    DDP_THROW(IoError, "'{}': corrupt gzip data near compressed byte {}: {}", path, consumed, msg);
  }
  inflateEnd(&zs);
  return out;
}
#else
static std::vector<uint8_t> gunzip(const std::string& path, const std::vector<uint8_t>&) {
  DDP_THROW(IoError,
            "'{}' is gzip-compressed but this libddp was built without zlib; decompress it "
            "(gunzip -k) or rebuild with zlib",
            path);
}
#endif

std::vector<uint8_t> read_file(const std::string& path, bool* was_gzip) {
  io::detail::ReadFile f(path);
  std::vector<uint8_t> bytes(f.size());
  if (!bytes.empty()) f.read_at(0, bytes.data(), bytes.size());
  const bool gz = is_gzip(bytes);
  if (was_gzip) *was_gzip = gz;
  if (gz) return gunzip(path, bytes);
  return bytes;
}

const std::array<float, 256>& unit_float_table() {
  // x / 255 rounded once, like torch's img.float().div(255) (a multiplication
  // by 1/255 would be off by an ulp for some x).
  static const auto kTable = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[size_t(i)] = float(i) / 255.0f;
    return t;
  }();
  return kTable;
}

void u8_to_unit_float(const uint8_t* src, float* dst, int64_t n) {
  const std::array<float, 256>& table = unit_float_table();
  for (int64_t i = 0; i < n; ++i) dst[i] = table[src[i]];
}

}  // namespace ddp::data::detail
