#pragma once
// Int2: a kernel size, stride, padding or dilation given as one int (both
// dims) or a pair {h, w}, like the `int or tuple` arguments of torch's 2-D
// layers: Conv2d(3, 8, 3) and Conv2d(3, 8, {3, 1}) both work. It lives in
// core because the kernels (tensor layer) take it as well as the nn layers.

#include <cstdint>
#include <string>

namespace ddp {

struct Int2 {
  int64_t h = 0, w = 0;
  Int2(int64_t v) : h(v), w(v) {}  // NOLINT: an int means (v, v), as in torch
  Int2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  bool operator==(const Int2&) const = default;
  // "(3, 3)"; std::to_string, not fmt, since .cu files include this header
  // and nvcc rejects fmt's compile-time format checks.
  std::string str() const {
    std::string s = "(";  // appended piecewise: GCC 12 warns falsely (-Wrestrict) on "(" + ...
    s += std::to_string(h);
    s += ", ";
    s += std::to_string(w);
    s += ")";
    return s;
  }
};

}  // namespace ddp
