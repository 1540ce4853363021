#pragma once
// The command line of the benchmarks: the shared CLI11-based parser
// (tools/cli/command_line.h, See Note [Usage errors exit 2]) with its
// default wording.
//
//   bench::ArgParser args("bench_gpt", "Times GPT training steps on synthetic tokens.");
//   args.add_int("--steps", &o.steps, "timed steps", /*min=*/1);
//   args.parse(argc, argv);   // UsageExit on --help or a bad command line
//
// Note [Benchmark usage errors]
// main() prints a UsageExit and returns its status: the benchmarks never
// exit() from inside, so destructors run.

#include <functional>

#include "command_line.h"

namespace bench {

using ArgParser = ddp_cli::CommandLine;
using UsageExit = ddp_cli::UsageExit;

// A benchmark's main(): runs body (which parses the command line and runs
// the benchmark) and turns what it throws into a message and an exit
// status: UsageExit's own (Note [Benchmark usage errors]), 1 for a
// ddp::Error or any other exception.
int guarded_main(const char* program, const std::function<int()>& body);

}  // namespace bench
