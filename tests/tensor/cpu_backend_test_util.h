#pragma once
// Helpers for the CPU backend tests: tensors over raw storage with explicit
// strides, built and read without the ops frontend.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "ddp/core/dtype.h"
#include "ddp/tensor/backend.h"

namespace ddp::cpu_test {

inline Backend& be() { return cpu_backend(); }

inline Shape dense_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = acc;
    acc *= shape[d];
  }
  return s;
}

// A tensor over a fresh storage holding `raw` verbatim, viewed with the
// given shape / strides / offset (dense strides when none are given).
template <class T>
Tensor make(DType dt, const std::vector<T>& raw, const Shape& shape, Shape strides = {},
            int64_t offset = 0) {
  EXPECT_EQ(sizeof(T), element_size(dt));
  // A little spare room keeps empty views valid for from_storage's bounds check.
  Storage st = be().allocate(std::max<size_t>(raw.size() * sizeof(T), 64), 0);
  if (!raw.empty()) std::memcpy(st.data(), raw.data(), raw.size() * sizeof(T));
  if (strides.empty()) strides = dense_strides(shape);
  return Tensor::from_storage(st, shape, strides, offset, dt);
}
template <class T>
Tensor make(const std::vector<T>& raw, const Shape& shape, Shape strides = {}, int64_t offset = 0) {
  return make<T>(dtype_of<T>(), raw, shape, std::move(strides), offset);
}
// Bool tensors from 0/1 bytes (std::vector<bool> is bit-packed).
inline Tensor make_bool(const std::vector<uint8_t>& raw, const Shape& shape, Shape strides = {}) {
  return make<uint8_t>(DType::bool_, raw, shape, std::move(strides));
}

// A dense tensor filled with a marker byte pattern, to catch unwritten outputs.
inline Tensor empty(DType dt, const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  const size_t nbytes = size_t(n) * element_size(dt);
  Storage st = be().allocate(nbytes, 0);
  if (nbytes) std::memset(st.data(), 0x7b, nbytes);
  return Tensor::from_storage(st, shape, dense_strides(shape), 0, dt);
}

// The first numel elements of a dense tensor.
template <class T>
std::vector<T> values(const Tensor& t) {
  std::vector<T> v(size_t(t.numel()));
  if (!v.empty()) std::memcpy(v.data(), t.data_ptr(), v.size() * sizeof(T));
  return v;
}
template <class T>
std::vector<float> as_float(const Tensor& t) {
  auto v = values<T>(t);
  return std::vector<float>(v.begin(), v.end());
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace ddp::cpu_test
