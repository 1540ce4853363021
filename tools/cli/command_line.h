#pragma once
// One command-line parser for every libddp program (the trainers, the
// benchmarks, ddprun): CLI11 does the parsing, this class keeps what the
// programs had before it, namely their flags, their --help layout and
// their words for a bad value.
//
//   ddp_cli::CommandLine cli("bench_gpt", "Times GPT training steps.");
//   cli.add_int("--steps", &o.steps, "timed steps", /*min=*/1);
//   cli.parse(argc, argv);   // UsageExit on --help or a bad command line
//
// Note [Usage errors exit 2]
// A bad command line (unknown option, missing or malformed value, a value
// out of range or not among the choices, a flag given a value) raises
// UsageExit with status 2, the Unix convention for "bad command line"
// (argparse, getopt tools), and a message "<program>: <option>: <why>"
// that names the option as it was typed; --help raises it with status 0
// and the usage text. The benchmarks' main() prints it and returns, so
// destructors run; the trainers exit() before any process group exists,
// so every rank of a job fails the same way and nobody waits for a
// collective. Option combinations that are only checked after joining the
// job are decided from values that are the same on every rank, so all
// ranks exit together.
//
// Note [CLI11 behind one class]
// CLI11 parses; we register one CLI11 option per spelling ("-n" and
// "--iters" are two) so that an error names what the user typed, convert
// values in our own callbacks so that the messages stay the ones the CLI
// tests pin (CLI11's own read "Value 0 not in range"), and let unknown
// arguments through (allow_extras) to report the first one ourselves.
// Repeated options keep the last value, as before.

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ddp_cli {

struct UsageExit : std::runtime_error {
  UsageExit(const std::string& text, int c, std::string why = "")
      : std::runtime_error(text), code(c), reason(std::move(why)) {}
  int code;            // 0 for --help (text to stdout), 2 for a bad command line (stderr)
  std::string reason;  // the one-line "<option>: <why>" without program name and hint
};

// How a program words a bad value. {0} is the value as typed, {1} the bound.
// The trainers and the benchmarks word a few of these differently, and
// their CLI tests pin each wording, so each family passes its own.
struct Wording {
  std::string not_integer = "'{0}' is not an integer";
  std::string not_number = "'{0}' is not a number";
  std::string below_min = "{0} must be at least {1}";
  std::string not_above = "{0} must be greater than {1}";
  std::string missing_value = "missing value";
  std::string hint = "(see {0} --help)";  // {0}: the program
};

// The trainers' words (examples/common/cli.h).
Wording trainer_wording();

class CommandLine {
 public:
  CommandLine(std::string program, std::string summary, Wording wording = {});
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // names: one or more spellings separated by commas, "-n,--iters".
  void add_flag(const std::string& names, bool* out, const std::string& help);
  void add_int(const std::string& names, int64_t* out, const std::string& help,
               int64_t min = std::numeric_limits<int64_t>::min());
  // The value must be >= min, or > min when exclusive.
  void add_double(const std::string& names, double* out, const std::string& help,
                  double min = std::numeric_limits<double>::lowest(), bool exclusive = false);
  // choices: when not empty, the value must be one of them. meta names the
  // value in the usage text (default: the choices joined by '|', or "S").
  void add_string(const std::string& names, std::string* out, const std::string& help,
                  std::vector<std::string> choices = {}, std::string meta = "");
  // A value parsed by `set`, which returns "" or why the value is bad.
  void add_value(const std::string& names, const std::string& meta, const std::string& help,
                 const std::string& default_text,
                 std::function<std::string(const std::string&)> set);

  // Programs with a hand-laid usage text (bench_collectives, ddprun) set it;
  // otherwise usage() lays out the registered options.
  void set_usage(std::string text) { usage_override_ = std::move(text); }
  // Stop at the first argument that is not an option (or after "--"): it
  // and everything after it are the command, as for ddprun PROGRAM ARGS.
  void stop_at_command() { stop_at_command_ = true; }
  const std::vector<std::string>& command() const { return command_; }
  // A usage error also prints the usage text (ddprun, bench_ddp did).
  void usage_on_error() { usage_on_error_ = true; }

  // Fills the registered outputs from argv; UsageExit as Note [Usage errors
  // exit 2] says.
  void parse(int argc, const char* const* argv);
  // Whether any spelling of the option (as registered) was given.
  bool given(const std::string& names) const;
  // UsageExit(2) "<program>: <message>" and the hint, for checks that
  // involve several options.
  [[noreturn]] void fail(const std::string& message) const;
  std::string usage() const;
  const std::string& program() const { return program_; }

 private:
  struct Option;
  Option& add(const std::string& names, std::string help, std::string meta,
              std::string default_text, bool is_flag,
              std::function<std::string(const std::string&)> set);

  // The registered spelling of a name CLI11 reports without dashes.
  std::string spelling_of(const std::string& bare) const;

  std::string program_, summary_;
  Wording wording_;
  std::unique_ptr<CLI::App> app_;
  std::vector<std::unique_ptr<Option>> options_;
  std::string usage_override_;
  bool stop_at_command_ = false, usage_on_error_ = false;
  std::vector<std::string> command_;
};

}  // namespace ddp_cli
