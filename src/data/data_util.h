#pragma once
// Internal helpers of the data layer: whole-file reads with transparent gzip,
// the random-number mixing shared by samplers, transforms and synthetic
// datasets, and u8 image conversion.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ddp/tensor/generator.h"

namespace ddp::data::detail {

// The file's bytes; gzip streams (magic 1f 8b) are decompressed, whatever
// the name. IoError naming the file when it is missing or unreadable, when
// the gzip stream is corrupt or cut short (with the compressed offset), or
// when it is gzip and this build has no zlib. *was_gzip tells which it was
// (offsets in later messages are then in the decompressed stream).
std::vector<uint8_t> read_file(const std::string& path, bool* was_gzip = nullptr);
bool is_gzip(const std::vector<uint8_t>& head);

// SplitMix64's finalizer: spreads (seed, epoch, ...) into a Philox key so that
// nearby seeds give unrelated streams.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
inline uint64_t mix_key(uint64_t a, uint64_t b) { return mix64(a ^ mix64(b)); }

// Four 32-bit words for (key, counter).
struct Words {
  uint32_t w[4];
};
inline Words philox(uint64_t key, uint64_t counter) {
  Words r{};
  Philox4x32::draw(key, counter, r.w);
  return r;
}

// Uniform in [0, n) from 64 random bits (the bias, n / 2^64, is negligible
// for dataset sizes).
inline uint64_t below(uint64_t bits, uint64_t n) {
  return uint64_t((static_cast<unsigned __int128>(bits) * n) >> 64);
}

// dst[i] = src[i] / 255 (torchvision's ToTensor scaling), and its table.
void u8_to_unit_float(const uint8_t* src, float* dst, int64_t n);
const std::array<float, 256>& unit_float_table();

}  // namespace ddp::data::detail
