#pragma once
// Reporting for the example trainers: JSON objects (the metrics file and the
// final line), wall-clock timing, the progress line, and memory use.
//
// Note [Metrics lines]
// A metrics file holds one JSON object per line (JSON Lines), written and
// flushed as each logged step happens, so a crashed or still-running job
// leaves a readable file and `tail -f` / tools/plot_metrics.py can follow
// it. Only rank 0 writes. The trainers' last line on stdout is also one JSON
// object, so a script can take `tail -n 1` and parse it without scraping
// the human-readable summary above it.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "ddp/core/device.h"
#include "ddp/io/json.h"

namespace examples {

// A flat JSON object built key by key, in insertion order: libddp's one
// JSON writer (ddp/io/json.h), with doubles rounded to 6 significant digits
// so the lines stay short and a resumed run prints the same losses.
class JsonObject : public ddp::io::json::Object {
 public:
  JsonObject() : Object({.significant_digits = 6}) {}
};

// The metrics file of Note [Metrics lines]. An empty path or a rank other
// than 0 makes every call a no-op. The file is truncated when opened, except
// when `append` (a resumed run continues the file of the run it resumes).
class MetricsFile {
 public:
  MetricsFile(const std::string& path, int rank, bool append);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  void write(const ddp::io::json::Object& line);

 private:
  std::FILE* file_ = nullptr;
};

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void reset() { start_ = std::chrono::steady_clock::now(); }
  // Leaves `s` seconds out of the time measured (an evaluation in between).
  void exclude(double s) {
    start_ += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(s));
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// "42s", "3m05s", "1h02m".
std::string format_duration(double seconds);

// Peak memory of this rank in MiB: the caching allocator's peak allocated
// bytes on a GPU, else the process's peak resident set (VmHWM).
double peak_memory_mib(const ddp::Device& device);

// Prints one progress line on stdout and flushes it.
struct Progress {
  int64_t epoch = 0, epochs = 0;  // epoch is 1-based
  int64_t step = 0, total_steps = 0;
  double loss = 0, lr = 0;
  double rate = 0;                // items per second
  const char* rate_unit = "img/s";
  double eta_s = 0;
  // When >= 0: the seconds per step the trainer waited for its batch (the
  // data stall) and the loader's capacity in items/s (LoaderStats).
  double data_stall_s = -1, loader_rate = -1;
};
void print_progress(const Progress& p);

}  // namespace examples
