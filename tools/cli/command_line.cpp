#include "command_line.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace ddp_cli {

struct CommandLine::Option {
  std::vector<std::string> names;
  std::string help, meta, default_text;
  bool is_flag = false;
  bool given = false;
  std::function<std::string(const std::string&)> set;  // "" or why the value is bad
};

namespace {

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= names.size()) {
    const size_t comma = std::min(names.find(',', start), names.size());
    if (comma > start) out.push_back(names.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += sep;  // piecewise: GCC 12 warns falsely (-Wrestrict) on sep + item
    out += item;
  }
  return out;
}

std::string format_double(double v) { return fmt::format("{}", v); }

}  // namespace

Wording trainer_wording() {
  Wording w;
  w.not_number = "'{0}' is not a finite number";
  w.below_min = "'{0}' is below the minimum {1}";
  w.missing_value = "needs a value";
  w.hint = "(run {0} --help for the options)";
  return w;
}

CommandLine::CommandLine(std::string program, std::string summary, Wording wording)
    : program_(std::move(program)),
      summary_(std::move(summary)),
      wording_(std::move(wording)),
      app_(std::make_unique<CLI::App>(summary_, program_)) {
  app_->set_help_flag("-h,--help");
  app_->allow_extras();
}

CommandLine::~CommandLine() = default;

CommandLine::Option& CommandLine::add(const std::string& names, std::string help, std::string meta,
                                      std::string default_text, bool is_flag,
                                      std::function<std::string(const std::string&)> set) {
  auto option = std::make_unique<Option>();
  option->names = split_names(names);
  for (const std::string& name : option->names)
    for (const auto& other : options_)
      if (std::count(other->names.begin(), other->names.end(), name) != 0)  // a programming error
        throw std::logic_error("CommandLine: option " + name + " registered twice");
  option->help = std::move(help);
  option->meta = std::move(meta);
  option->default_text = std::move(default_text);
  option->is_flag = is_flag;
  option->set = std::move(set);
  Option* o = option.get();
  // One CLI11 option per spelling, so that errors name what was typed
  // (Note [CLI11 behind one class]).
  for (const std::string& name : o->names) {
    if (is_flag) {
      app_->add_flag_callback(name, [o] {
             o->set("");
             o->given = true;
           })
          ->disable_flag_override();
    } else {
      app_->add_option_function<std::string>(name,
                                             [this, o, name](const std::string& value) {
                                               if (std::string why = o->set(value); !why.empty())
                                                 fail(name + ": " + why);
                                               o->given = true;
                                             })
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
  }
  options_.push_back(std::move(option));
  return *o;
}

void CommandLine::add_flag(const std::string& names, bool* out, const std::string& help) {
  add(names, help, "", "", true, [out](const std::string&) {
    *out = true;
    return std::string();
  });
}

void CommandLine::add_int(const std::string& names, int64_t* out, const std::string& help,
                          int64_t min) {
  const Wording& w = wording_;
  add(names, help, "N", std::to_string(*out), false, [out, min, &w](const std::string& v) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno == ERANGE)
      return fmt::format(fmt::runtime(w.not_integer), v);
    if (x < min) return fmt::format(fmt::runtime(w.below_min), v, min);
    *out = x;
    return std::string();
  });
}

void CommandLine::add_double(const std::string& names, double* out, const std::string& help,
                             double min, bool exclusive) {
  const Wording& w = wording_;
  add(names, help, "X", format_double(*out), false,
      [out, min, exclusive, &w](const std::string& v) {
        char* end = nullptr;
        errno = 0;
        const double x = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x))
          return fmt::format(fmt::runtime(w.not_number), v);
        if (exclusive && !(x > min)) return fmt::format(fmt::runtime(w.not_above), v, min);
        if (!exclusive && x < min) return fmt::format(fmt::runtime(w.below_min), v, min);
        *out = x;
        return std::string();
      });
}

void CommandLine::add_string(const std::string& names, std::string* out, const std::string& help,
                             std::vector<std::string> choices, std::string meta) {
  if (meta.empty()) meta = choices.empty() ? std::string(1, 'S') : join(choices, "|");
  add(names, help, meta, *out, false, [out, choices](const std::string& v) {
    if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end())
      return fmt::format("'{}' is not one of {}", v, join(choices, ", "));
    *out = v;
    return std::string();
  });
}

void CommandLine::add_value(const std::string& names, const std::string& meta,
                            const std::string& help, const std::string& default_text,
                            std::function<std::string(const std::string&)> set) {
  add(names, help, meta, default_text, false, std::move(set));
}

void CommandLine::parse(int argc, const char* const* argv) {
  std::vector<std::string> args;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (stop_at_command_ && (arg == "--" || arg.empty() || arg[0] != '-')) break;
    args.push_back(arg);
    // The value of an option that takes one may look like anything.
    if (stop_at_command_ && arg.find('=') == std::string::npos && i + 1 < argc)
      for (const auto& o : options_)
        if (!o->is_flag && std::count(o->names.begin(), o->names.end(), arg) != 0) {
          args.push_back(argv[++i]);
          break;
        }
  }
  if (i < argc && std::string(argv[i]) == "--") ++i;
  command_.assign(argv + i, argv + argc);

  std::reverse(args.begin(), args.end());  // CLI11 takes them from the back
  try {
    app_->parse(args);
  } catch (const CLI::CallForHelp&) {
    throw UsageExit(usage(), 0);
  } catch (const CLI::ArgumentMismatch& e) {
    // "NAME: 1 required TEXT missing" or "NAME was given a disallowed flag override".
    const std::string what = e.what();
    if (const auto at = what.find(" was given a disallowed flag override"); at != std::string::npos)
      fail(spelling_of(what.substr(0, at)) + ": takes no value");
    const auto colon = what.find(": ");
    fail(what.substr(0, colon) + ": " + wording_.missing_value);
  } catch (const CLI::ParseError& e) {
    fail(e.what());  // none expected: every value is converted by our callbacks
  }
  const std::vector<std::string> extras = app_->remaining();
  if (!extras.empty()) {
    const std::string& first = extras.front();
    fail(first.size() > 1 && first[0] == '-' ? fmt::format("unknown option '{}'", first)
                                             : fmt::format("unexpected argument '{}'", first));
  }
}

std::string CommandLine::spelling_of(const std::string& bare) const {
  // CLI11 names a flag without its dashes ("resume" for --resume).
  for (const auto& o : options_)
    for (const std::string& name : o->names)
      if (name == bare || name.substr(name.find_first_not_of('-')) == bare) return name;
  return bare;
}

bool CommandLine::given(const std::string& names) const {
  const std::vector<std::string> wanted = split_names(names);
  for (const auto& o : options_)
    for (const std::string& name : wanted)
      if (std::count(o->names.begin(), o->names.end(), name) != 0 && o->given) return true;
  return false;
}

void CommandLine::fail(const std::string& message) const {
  std::string text = fmt::format("{}: {}\n", program_, message);
  if (usage_on_error_)
    text += usage();
  else
    text += fmt::format(fmt::runtime(wording_.hint), program_) + "\n";
  throw UsageExit(text, 2, message);
}

std::string CommandLine::usage() const {
  if (!usage_override_.empty()) return usage_override_;
  std::string out = fmt::format("usage: {} [options]\n{}\n\noptions:\n", program_, summary_);
  for (const auto& o : options_) {
    std::string left = join(o->names, ", ") + (o->is_flag ? "" : " " + o->meta);
    std::string help = o->help;
    // A help text that explains its default itself keeps it.
    if (!o->is_flag && !o->default_text.empty() && help.find("default") == std::string::npos)
      help += fmt::format(" (default {})", o->default_text);
    if (left.size() > 26)  // a long list of choices gets a line of its own
      out += fmt::format("  {}\n  {:<26}  {}\n", left, "", help);
    else
      out += fmt::format("  {:<26}  {}\n", left, help);
  }
  out += fmt::format("  {:<26}  {}\n", "-h, --help", "print this text and exit");
  return out;
}

}  // namespace ddp_cli
