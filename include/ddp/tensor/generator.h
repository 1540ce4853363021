#pragma once
// Counter-based random numbers (Philox-4x32-10).
//
// Note [Counter-based RNG]
// Element i of a random op drawn at generator offset o uses counter o + i and
// key = seed, so the CPU and CUDA kernels produce the very same numbers and a
// generator's whole state is (seed, offset): cheap to save and restore.

#include <cstdint>
#include <mutex>

#include "ddp/core/macros.h"

namespace ddp {

struct Philox4x32 {
  // Returns four 32-bit random words for (key, counter).
  DDP_INLINE_HD static void draw(uint64_t key, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
    for (int round = 0; round < 10; ++round) {
      uint64_t p0 = uint64_t(0xD2511F53u) * c0;
      uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
      uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
      uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
      c1 = uint32_t(p1);
      c3 = uint32_t(p0);
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
  }
  // Uniform in [0, 1) from 24 random bits (exact in float), or 53 for double.
  DDP_INLINE_HD static float to_unit_float(uint32_t x) { return float(x >> 8) * (1.0f / 16777216.0f); }
  DDP_INLINE_HD static double to_unit_double(uint32_t hi, uint32_t lo) {
    uint64_t v = (uint64_t(hi) << 21) ^ (uint64_t(lo) >> 11);
    return double(v & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
  }
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void manual_seed(uint64_t seed) { std::lock_guard<std::mutex> g(mu_); seed_ = seed; offset_ = 0; }
  void set_state(uint64_t seed, uint64_t offset) { std::lock_guard<std::mutex> g(mu_); seed_ = seed; offset_ = offset; }
  // Reserves n counters and returns the first: the caller's kernel uses
  // counters [result, result + n).
  uint64_t reserve(uint64_t n) { std::lock_guard<std::mutex> g(mu_); uint64_t o = offset_; offset_ += n; return o; }

 private:
  std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The generator random ops use when none is given (like torch's default
// generator). manual_seed(s) reseeds it.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace ddp
