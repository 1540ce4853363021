#pragma once
// bench_collectives' command line (nccl-tests style). See docs/benchmarks.md.

#include <cstdint>
#include <stdexcept>
#include <string>

#include "collective.h"
#include "ddp/core/dtype.h"
#include "ddp/dist/process_group.h"

namespace bench {

// Bad command-line input: main prints the message and exits with status 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& msg) : std::runtime_error(msg) {}
};

struct Options {
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t(32) << 20;
  int64_t step_factor = 2;
  ddp::DType dtype = ddp::DType::f32;
  std::string dtype_label = "float";  // the nccl-tests name printed in the table
  ddp::dist::ReduceOp op = ddp::dist::ReduceOp::sum;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  bool blocking = false;  // -z 1: wait for each collective before the next
  int root = 0;
  // Timed rounds per size: each round times -n iterations of libddp, then
  // of raw MPI; a row reports the median round. Alternating keeps a drift in
  // machine load from favouring whichever of the two runs first.
  int rounds = 1;
  std::string backend = "mpi";
  Collective collective = Collective::allreduce;
  std::string json_path;  // empty: no JSON
  bool help = false;
};

// Parses argv; raises UsageError with a one-line reason on bad input.
Options parse_options(int argc, const char* const* argv);
std::string usage_text();

// "8", "64K", "128M", "1G" (K = 1024 bytes, as in nccl-tests); UsageError
// naming `flag` otherwise.
int64_t parse_size(const std::string& text, const std::string& flag);

}  // namespace bench
