#pragma once
// CRC-32 (IEEE 802.3) for checkpoint checksums: zlib's crc32_z, so
// `python3 -c "import zlib; ..."` can check a file. Internal to src/io.

#include <zlib.h>

#include <cstddef>
#include <cstdint>

namespace ddp::io::detail {

// Continues a CRC: crc32(crc32(0, a), b) == crc32(0, a + b).
inline uint32_t crc32(uint32_t crc, const void* data, size_t n) {
  return uint32_t(::crc32_z(crc, static_cast<const Bytef*>(data), z_size_t(n)));
}

}  // namespace ddp::io::detail
