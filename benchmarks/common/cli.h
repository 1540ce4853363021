#pragma once
// The command line of bench_resnet and bench_gpt: `--name value` options and
// value-less flags, each registered with where its value goes.
//
//   bench::ArgParser args("bench_gpt", "Times GPT training steps on synthetic tokens.");
//   args.add_int("--steps", &o.steps, "timed steps", /*min=*/1);
//   args.parse(argc, argv);   // UsageExit on --help or a bad command line
//
// Note [Benchmark usage errors]
// A bad command line (unknown option, missing or malformed value, a value
// out of range or not among the choices) raises UsageExit with status 2,
// the Unix convention, and a message that names the option; --help raises it
// with status 0 and the usage text. main() prints it and returns the status:
// the benchmarks never exit() from inside, so destructors run.

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

struct UsageExit : std::runtime_error {
  UsageExit(const std::string& text, int c) : std::runtime_error(text), code(c) {}
  int code;  // 0 for --help, 2 for a bad command line
};

// A benchmark's main(): runs body (which parses the command line and runs
// the benchmark) and turns what it throws into a message and an exit
// status: UsageExit's own (Note [Benchmark usage errors]), 1 for a
// ddp::Error or any other exception.
int guarded_main(const char* program, const std::function<int()>& body);

class ArgParser {
 public:
  ArgParser(std::string program, std::string summary);

  void add_flag(const std::string& name, bool* out, const std::string& help);
  void add_int(const std::string& name, int64_t* out, const std::string& help, int64_t min);
  // The value must be > min (exclusive: "positive" is min = 0).
  void add_double(const std::string& name, double* out, const std::string& help, double above);
  // choices: when not empty, the value must be one of them. meta names the
  // value in the usage text (default: the choices, or "S").
  void add_string(const std::string& name, std::string* out, const std::string& help,
                  std::vector<std::string> choices = {}, std::string meta = "");

  // Fills the registered outputs from argv; UsageExit as Note [Benchmark
  // usage errors] says.
  void parse(int argc, char** argv);
  bool given(const std::string& name) const;
  // UsageExit(2) with "<program>: <message>" and a pointer to --help, for
  // checks that involve several options.
  [[noreturn]] void fail(const std::string& message) const;
  std::string usage() const;

 private:
  struct Option {
    std::string name, help, meta, default_text;
    bool is_flag = false;
    bool given = false;
    // Stores the value; returns "" or why the value is bad.
    std::function<std::string(const std::string&)> set;
  };
  void add(Option option);

  std::string program_, summary_;
  std::vector<Option> options_;
};

}  // namespace bench
