#pragma once
// "1.50 MiB": byte counts for messages and summaries.

#include <cstddef>
#include <string>

#include <fmt/format.h>

namespace ddp {

inline std::string format_bytes(size_t n) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024.0 && u < 6) v /= 1024.0, ++u;
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.2f} {}", v, kUnits[u]);
}

}  // namespace ddp
