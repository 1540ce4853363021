#include "cli.h"

#include <fmt/format.h>

#include "ddp/core/error.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace bench {

namespace {

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += sep;  // piecewise: GCC 12 warns falsely (-Wrestrict) on sep + item
    out += item;
  }
  return out;
}

}  // namespace

ArgParser::ArgParser(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void ArgParser::add(Option option) {
  for (const Option& o : options_)
    if (o.name == option.name)  // a programming error, not a user's
      throw std::logic_error("ArgParser: option " + option.name + " registered twice");
  options_.push_back(std::move(option));
}

void ArgParser::add_flag(const std::string& name, bool* out, const std::string& help) {
  add({.name = name, .help = help, .is_flag = true, .set = [out](const std::string&) {
         *out = true;
         return std::string();
       }});
}

void ArgParser::add_int(const std::string& name, int64_t* out, const std::string& help,
                        int64_t min) {
  add({.name = name, .help = help, .meta = "N", .default_text = std::to_string(*out),
       .set = [out, min](const std::string& v) {
         char* end = nullptr;
         errno = 0;
         const long long x = std::strtoll(v.c_str(), &end, 10);
         if (v.empty() || *end != '\0' || errno == ERANGE)
           return fmt::format("'{}' is not an integer", v);
         if (x < min) return fmt::format("{} must be at least {}", x, min);
         *out = x;
         return std::string();
       }});
}

void ArgParser::add_double(const std::string& name, double* out, const std::string& help,
                           double above) {
  add({.name = name, .help = help, .meta = "X", .default_text = fmt::format("{}", *out),
       .set = [out, above](const std::string& v) {
         char* end = nullptr;
         const double x = std::strtod(v.c_str(), &end);
         if (v.empty() || *end != '\0' || !std::isfinite(x))
           return fmt::format("'{}' is not a number", v);
         if (!(x > above)) return fmt::format("{} must be greater than {}", v, above);
         *out = x;
         return std::string();
       }});
}

void ArgParser::add_string(const std::string& name, std::string* out, const std::string& help,
                           std::vector<std::string> choices, std::string meta) {
  if (meta.empty()) meta = choices.empty() ? std::string(1, 'S') : join(choices, "|");
  add({.name = name, .help = help, .meta = meta, .default_text = *out,
       .set = [out, choices](const std::string& v) {
         if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end()) {
           return fmt::format("'{}' is not one of {}", v, join(choices, ", "));
         }
         *out = v;
         return std::string();
       }});
}

void ArgParser::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") throw UsageExit(usage(), 0);
    std::string value;
    bool has_value = false;
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);  // --name=value
      arg.resize(eq);
      has_value = true;
    }
    auto it = std::find_if(options_.begin(), options_.end(),
                           [&](const Option& o) { return o.name == arg; });
    if (it == options_.end())
      fail(arg.rfind("-", 0) == 0 ? fmt::format("unknown option '{}'", arg)
                                  : fmt::format("unexpected argument '{}'", arg));
    if (it->is_flag && has_value) fail(fmt::format("{} takes no value", arg));
    if (!it->is_flag && !has_value) {
      if (i + 1 >= argc) fail(fmt::format("{}: missing value", arg));
      value = argv[++i];
    }
    if (std::string why = it->set(value); !why.empty()) fail(fmt::format("{}: {}", arg, why));
    it->given = true;
  }
}

bool ArgParser::given(const std::string& name) const {
  for (const Option& o : options_)
    if (o.name == name) return o.given;
  return false;
}

void ArgParser::fail(const std::string& message) const {
  throw UsageExit(fmt::format("{}: {}\n(see {} --help)\n", program_, message, program_), 2);
}

std::string ArgParser::usage() const {
  std::string out = fmt::format("usage: {} [options]\n{}\n\n", program_, summary_);
  for (const Option& o : options_) {
    std::string left = o.is_flag ? o.name : o.name + " " + o.meta;
    std::string help = o.help;
    // A help text that explains its default itself keeps it.
    if (!o.is_flag && !o.default_text.empty() && help.find("default") == std::string::npos)
      help += fmt::format(" (default {})", o.default_text);
    if (left.size() > 26)  // a long list of choices gets a line of its own
      out += fmt::format("  {}\n  {:<26} {}\n", left, "", help);
    else
      out += fmt::format("  {:<26} {}\n", left, help);
  }
  out += fmt::format("  {:<26} {}\n", "--help", "print this text");
  return out;
}

int guarded_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageExit& e) {
    std::fputs(e.what(), e.code == 0 ? stdout : stderr);
    return e.code;
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: unexpected error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace bench
