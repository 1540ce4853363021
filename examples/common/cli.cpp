#include "common/cli.h"

#include <cstdio>
#include <cstdlib>

namespace examples {

namespace {

[[noreturn]] void exit_with(const ddp_cli::UsageExit& e) {
  std::fputs(e.what(), e.code == 0 ? stdout : stderr);
  std::fflush(nullptr);
  std::exit(e.code);
}

}  // namespace

void Cli::parse(int argc, char** argv) {
  try {
    CommandLine::parse(argc, argv);
  } catch (const ddp_cli::UsageExit& e) {
    exit_with(e);
  }
}

void Cli::fail(const std::string& message) const {
  try {
    CommandLine::fail(message);
  } catch (const ddp_cli::UsageExit& e) {
    exit_with(e);
  }
}

}  // namespace examples
