#pragma once
// The table (nccl-tests layout) and the JSON rows of bench_collectives; only
// rank 0 makes one.

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "options.h"

namespace bench {

// One size, already agreed over the ranks.
struct Row {
  int64_t bytes = 0;
  int64_t count = 0;
  double time_s = 0;       // max over ranks of the average per iteration
  int64_t wrong = -1;      // summed over ranks; -1: not checked
  double raw_time_s = -1;  // raw-MPI baseline; < 0: none; NaN: not measurable
};

class Report {
 public:
  // `json` may be null. has_raw adds the raw-MPI columns and JSON fields.
  Report(const Options& opts, int world_size, bool has_raw, std::FILE* out, std::FILE* json);
  void header(const std::vector<std::string>& info_lines);
  void row(const Row& r);
  // Prints the footer and closes the JSON array.
  void footer();
  int64_t total_wrong() const { return total_wrong_; }

 private:
  const Options& opts_;
  int world_;
  bool has_raw_;
  std::FILE* out_;
  std::FILE* json_;
  int rows_ = 0;
  double busbw_sum_ = 0, raw_busbw_sum_ = 0;
  int raw_rows_ = 0;
  int64_t total_wrong_ = 0;
};

}  // namespace bench
