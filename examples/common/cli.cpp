#include "common/cli.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

namespace examples {

namespace {

std::string format_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

Cli::Cli(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void Cli::add(Option option) {
  if (find(option.name) != nullptr) {
    std::fprintf(stderr, "%s: internal error: flag %s registered twice\n", program_.c_str(),
                 option.name.c_str());
    std::abort();
  }
  options_.push_back(std::move(option));
}

Cli::Option* Cli::find(const std::string& name) {
  for (auto& o : options_)
    if (o.name == name) return &o;
  return nullptr;
}

bool Cli::given(const std::string& name) const {
  for (const auto& o : options_)
    if (o.name == name) return o.given;
  return false;
}

void Cli::add_flag(const std::string& name, bool* out, const std::string& help) {
  add({.name = name, .help = help, .is_flag = true, .set = [out](const std::string&) { *out = true; }});
}

void Cli::add_int(const std::string& name, int64_t* out, const std::string& help, int64_t min) {
  add({.name = name,
       .help = help,
       .meta = "N",
       .default_text = std::to_string(*out),
       .set = [out, min](const std::string& s) {
         char* end = nullptr;
         errno = 0;
         const long long v = std::strtoll(s.c_str(), &end, 10);
         if (s.empty() || end == nullptr || *end != '\0' || errno == ERANGE)
           throw "'" + s + "' is not an integer";
         if (v < min) throw "'" + s + "' is below the minimum " + std::to_string(min);
         *out = v;
       }});
}

void Cli::add_double(const std::string& name, double* out, const std::string& help, double min) {
  add({.name = name,
       .help = help,
       .meta = "X",
       .default_text = format_double(*out),
       .set = [out, min](const std::string& s) {
         char* end = nullptr;
         errno = 0;
         const double v = std::strtod(s.c_str(), &end);
         if (s.empty() || end == nullptr || *end != '\0' || errno == ERANGE || !std::isfinite(v))
           throw "'" + s + "' is not a finite number";
         if (v < min) throw "'" + s + "' is below the minimum " + format_double(min);
         *out = v;
       }});
}

void Cli::add_string(const std::string& name, std::string* out, const std::string& help,
                     std::vector<std::string> choices) {
  std::string meta = "S";
  if (!choices.empty()) {
    meta.clear();
    for (const auto& c : choices) meta += (meta.empty() ? "" : "|") + c;
  }
  add({.name = name,
       .help = help,
       .meta = meta,
       .default_text = *out,
       .set = [out, choices, meta](const std::string& s) {
         if (!choices.empty()) {
           bool ok = false;
           for (const auto& c : choices) ok = ok || c == s;
           if (!ok) throw "'" + s + "' is not one of " + meta;
         }
         *out = s;
       }});
}

std::string Cli::usage() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [options]\n" << summary_ << "\n\noptions:\n";
  for (const auto& o : options_) {
    std::string left = "  " + o.name + (o.is_flag ? "" : " " + o.meta);
    if (left.size() < 30) left.resize(30, ' ');
    else left += "\n" + std::string(30, ' ');
    os << left << o.help;
    if (!o.is_flag && !o.default_text.empty()) os << " (default " << o.default_text << ")";
    os << "\n";
  }
  os << "  --help                      print this and exit\n";
  return os.str();
}

void Cli::fail(const std::string& message) const {
  std::fprintf(stderr, "%s: %s\n(run %s --help for the options)\n", program_.c_str(),
               message.c_str(), program_.c_str());
  std::fflush(stderr);
  std::exit(2);
}

void Cli::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage().c_str(), stdout);
      std::exit(0);
    }
    std::string value;
    bool inline_value = false;
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    Option* o = find(arg);
    if (o == nullptr) fail("unknown flag " + arg);
    if (o->is_flag) {
      if (inline_value) fail(arg + ": takes no value (got '" + value + "')");
    } else if (!inline_value) {
      if (i + 1 >= argc) fail(arg + ": needs a value (" + o->meta + ")");
      value = argv[++i];
    }
    try {
      o->set(value);
    } catch (const std::string& why) {
      fail(arg + ": " + why);
    }
    o->given = true;
  }
}

}  // namespace examples
