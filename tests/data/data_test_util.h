#pragma once
// Helpers for the data tests: scratch folders, hand-written IDX / CIFAR /
// gzip files, and small in-memory datasets for the loader tests.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "ddp/data/dataset.h"

#include "scratch_dir.h"

namespace ddp::test {

using Bytes = std::vector<uint8_t>;


inline void write_bytes(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline Bytes read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

// An IDX u8 file: 00 00 08 <ndim>, big-endian dims, data.
inline Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes b{0, 0, 0x08, uint8_t(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// CRC-32 (IEEE, reflected), bit by bit: only for the gzip trailer below.
inline uint32_t crc32(const Bytes& b) {
  uint32_t c = 0xFFFFFFFFu;
  for (uint8_t x : b) {
    c ^= x;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// A valid gzip file holding `data` in stored (uncompressed) deflate blocks,
// so the tests need no zlib of their own (RFC 1951 section 3.2.4, RFC 1952).
inline Bytes gzip_stored(const Bytes& data) {
  Bytes g{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, data.size() - pos);
    const bool last = pos + n == data.size();
    g.push_back(last ? 1 : 0);  // BFINAL, BTYPE = 00
    g.push_back(uint8_t(n));
    g.push_back(uint8_t(n >> 8));
    g.push_back(uint8_t(~n));
    g.push_back(uint8_t(~n >> 8));
    g.insert(g.end(), data.begin() + ptrdiff_t(pos), data.begin() + ptrdiff_t(pos + n));
    pos += n;
  } while (pos < data.size());
  const uint32_t crc = crc32(data), size = uint32_t(data.size());
  for (int s = 0; s < 32; s += 8) g.push_back(uint8_t(crc >> s));
  for (int s = 0; s < 32; s += 8) g.push_back(uint8_t(size >> s));
  return g;
}

// Expects `fn` to throw E whose message contains every one of `parts`.
template <class E, class Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one mentioning " << ::testing::PrintToString(parts);
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nlacks: " << p;
  }
}

// Example i: input f32 [1, h, w] filled with i + pos / 1000, label i % 10.
// Reading example `fail_at` throws IoError("corrupt record <i>"); each read
// can be slowed down to widen races in the loader tests.
class CountingDataset final : public data::Dataset {
 public:
  CountingDataset(int64_t n, int64_t h = 2, int64_t w = 3, int64_t fail_at = -1,
                  std::chrono::microseconds delay = {})
      : Dataset(data::ExampleSpec{{1, h, w}, DType::f32, true, {}, DType::i64}),
        n_(n),
        fail_at_(fail_at),
        delay_(delay) {}
  int64_t size() const override { return n_; }
  std::string describe() const override { return "CountingDataset"; }
  mutable std::atomic<int64_t> reads{0};

 private:
  void do_read(int64_t index, void* input, void* target) const override {
    reads.fetch_add(1);
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    if (index == fail_at_) DDP_THROW(IoError, "corrupt record {}", index);
    const int64_t numel = shape_numel(spec().input_shape);
    auto* x = static_cast<float*>(input);
    for (int64_t p = 0; p < numel; ++p) x[p] = float(index) + float(p) / 1000.0f;
    *static_cast<int64_t*>(target) = index % 10;
  }
  int64_t n_, fail_at_;
  std::chrono::microseconds delay_;
};

template <class T>
std::vector<T> values_of(const Tensor& t) {
  return t.contiguous().to_vector<T>();
}

}  // namespace ddp::test
