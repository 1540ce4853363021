#pragma once
// CRC-32 (IEEE 802.3, the polynomial of zlib, gzip and PNG), for checkpoint
// checksums. Our own, since zlib is optional in this build; the values are
// zlib's crc32(), so `python3 -c "import zlib; ..."` can check a file.
// Internal to src/io.

#include <cstddef>
#include <cstdint>

namespace ddp::io::detail {

// Continues a CRC: crc32(crc32(0, a), b) == crc32(0, a + b).
uint32_t crc32(uint32_t crc, const void* data, size_t n);

}  // namespace ddp::io::detail
