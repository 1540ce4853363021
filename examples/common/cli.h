#pragma once
// The trainers' command line: the shared CLI11-based parser
// (tools/cli/command_line.h) with the trainers' wording, exiting instead of
// throwing.
//
//   examples::Cli cli("train_resnet", "Trains a ResNet with DistributedDataParallel.");
//   int64_t epochs = 2;
//   cli.add_int("--epochs", &epochs, "passes over the training set", /*min=*/1);
//   cli.parse(argc, argv);   // exits 2 on a bad flag, 0 after --help
//
// Flags are `--name value` or `--name=value`; booleans take no value. Every
// usage error names the flag and exits with status 2, before any process
// group exists (See Note [Usage errors exit 2]).

#include "command_line.h"

namespace examples {

class Cli : public ddp_cli::CommandLine {
 public:
  Cli(std::string program, std::string summary)
      : CommandLine(std::move(program), std::move(summary), ddp_cli::trainer_wording()) {}

  // Parses argv into the registered outputs. Prints usage and exits 0 for
  // --help/-h; prints "<program>: <flag>: <why>" and exits 2 on an unknown
  // flag, a missing or malformed value, or a value out of range.
  void parse(int argc, char** argv);
  // Prints "<program>: <message>" and a hint to stderr, exits 2.
  [[noreturn]] void fail(const std::string& message) const;
};

}  // namespace examples
