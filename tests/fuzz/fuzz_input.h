#pragma once
// Shared by the libFuzzer targets in tests/fuzz/: the input as a file for
// the parsers that read paths, and the rule every target checks: bad bytes
// may raise ddp::Error (a clear message), nothing else. Any other exception
// escapes to libFuzzer and is reported as a crash, as are the sanitizers'
// findings, leaks and hangs.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ddp/core/error.h"

namespace ddp::fuzz {

// One file per process, rewritten with every input.
class InputFile {
 public:
  explicit InputFile(const char* name) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir != nullptr ? dir : "/tmp") + "/ddp_fuzz_" + name + "_" +
            std::to_string(::getpid());
  }
  ~InputFile() { std::remove(path_.c_str()); }
  const std::string& write(const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr) std::abort();
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    return path_;
  }

 private:
  std::string path_;
};

template <class F>
void expect_only_ddp_errors(F&& parse) {
  try {
    parse();
  } catch (const ddp::Error&) {
    // A clear error for bad bytes: what a parser should do.
  }
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Quiet logging: warnings for every bad input would slow the runs down.
inline void quiet_logging() { ::setenv("DDP_LOG_LEVEL", "error", 1); }

}  // namespace ddp::fuzz
