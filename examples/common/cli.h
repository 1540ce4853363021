#pragma once
// A small command-line parser shared by the example trainers.
//
//   examples::Cli cli("train_resnet", "Trains a ResNet with DistributedDataParallel.");
//   int64_t epochs = 2;
//   cli.add_int("--epochs", &epochs, "passes over the training set", /*min=*/1);
//   cli.parse(argc, argv);   // exits 2 on a bad flag, 0 after --help
//
// Flags are `--name value` or `--name=value`; booleans take no value. Every
// usage error names the flag and exits with status 2, before any process
// group exists, so every rank of a job fails the same way and nobody waits
// for a collective (Note [Usage errors exit 2]).
//
// Note [Usage errors exit 2]
// Exit status 2 is the Unix convention for "bad command line" (argparse,
// getopt tools). The trainers also use it for option combinations that are
// only checked after joining the job (a global batch that the world size
// does not divide): those are decided from values that are the same on
// every rank, so all ranks exit together.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace examples {

class Cli {
 public:
  Cli(std::string program, std::string summary);

  void add_flag(const std::string& name, bool* out, const std::string& help);
  void add_int(const std::string& name, int64_t* out, const std::string& help,
               int64_t min = INT64_MIN);
  void add_double(const std::string& name, double* out, const std::string& help,
                  double min = -1e308);
  // choices: when not empty, the value must be one of them.
  void add_string(const std::string& name, std::string* out, const std::string& help,
                  std::vector<std::string> choices = {});

  // Parses argv into the registered outputs. Prints usage and exits 0 for
  // --help/-h; prints "<program>: <flag>: <why>" and exits 2 on an unknown
  // flag, a missing or malformed value, or a value out of range.
  void parse(int argc, char** argv);
  // Whether the flag was on the command line.
  bool given(const std::string& name) const;
  // Prints "<program>: <message>" and a hint to stderr, exits 2.
  [[noreturn]] void fail(const std::string& message) const;
  std::string usage() const;
  const std::string& program() const { return program_; }

 private:
  struct Option {
    std::string name, help, meta, default_text;
    bool is_flag = false;
    bool given = false;
    std::function<void(const std::string&)> set;  // throws std::string on a bad value
  };
  Option* find(const std::string& name);
  void add(Option option);

  std::string program_, summary_;
  std::vector<Option> options_;
};

}  // namespace examples
